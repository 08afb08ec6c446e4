// Scores one cache's raw results (the JSON the suite's CLI prints) with the suite's own classification
// (its determineTestResult), and prints the counts per class as one JSON object. With groups (the ids of the
// suite's test groups, comma-separated), only the tests of those groups are scored.
//   node cache_conformance_score.mjs <suite directory> <results.json> [group,group,...]
import { readFileSync } from 'fs'

const [suite, resultsFile, groups] = process.argv.slice(2)
const wanted = groups ? new Set(groups.split(',')) : null
const { determineTestResult } = await import(`${suite}/lib/display.mjs`)
const tests = (await import(`${suite}/tests/index.mjs`)).default
// The CLI runs the surrogate-control tests too (its cli.mjs adds them): score the same set.
tests.push((await import(`${suite}/tests/surrogate-control.mjs`)).default)
const results = JSON.parse(readFileSync(resultsFile, 'utf8'))

const counts = {}
const failed = { required: [], optimal: [] }
for (const suiteEntry of tests) {
  if (wanted && !wanted.has(suiteEntry.id)) continue
  for (const test of suiteEntry.tests) {
    const kind = test.kind || 'required'
    const symbol = determineTestResult(tests, test.id, results)[2]
    const key = `${kind} ${symbol}`
    counts[key] = (counts[key] || 0) + 1
    if (symbol === '⛔️') failed.required.push(test.id)
    if (symbol === '⚠️') failed.optimal.push(test.id)
  }
}
console.log(JSON.stringify({ counts, failed }))
