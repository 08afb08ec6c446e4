// Runs the suite's tests of the named groups (the ids of its test groups, e.g. cc-freshness), and the tests they
// depend on, through the cache at <base> with the suite's own runner and fetch, and prints the raw results as its
// CLI does (one JSON object).
// With --groups instead of a base, prints the ids of every group the CLI runs.
//   node cache_conformance_run.mjs <suite directory> <base> <group,group,...>
//   node cache_conformance_run.mjs <suite directory> --groups
import { createRequire } from 'module'

const [suite, base, groups] = process.argv.slice(2)
const tests = (await import(`${suite}/tests/index.mjs`)).default
// The CLI runs the surrogate-control tests too (its cli.mjs adds them): offer the same set.
tests.push((await import(`${suite}/tests/surrogate-control.mjs`)).default)
if (base === '--groups') {
  console.log(JSON.stringify(tests.map(group => group.id)))
} else {
  const fetch = createRequire(`${suite}/package.json`)('node-fetch')
  const { runTests, getResults } = await import(`${suite}/client/runner.mjs`)
  // The tests of the groups asked for, and every test they depend on (a test whose dependency did not run
  // scores as a dependency failure), each in its own group.
  const byId = new Map(tests.flatMap(group => group.tests.map(test => [test.id, group])))
  const wanted = new Set(tests.filter(group => groups.split(',').includes(group.id)).flatMap(group => group.tests))
  for (const test of wanted) {
    for (const id of test.depends_on || []) {
      wanted.add(byId.get(id).tests.find(other => other.id === id))
    }
  }
  const chosen = tests.map(group => ({ ...group, tests: group.tests.filter(test => wanted.has(test)) }))
  await runTests(chosen.filter(group => group.tests.length), fetch, false, base)
  console.log(JSON.stringify(getResults(), null, 2))
}
