"""Edge rules: parsing, validation errors with line numbers, and matching of _headers and _redirects."""

from __future__ import annotations

import pytest

from assetcdn.shared.edge_rules import (
    EMPTY_RULES,
    HeaderRules,
    RedirectRules,
    RuleSet,
    RulesSyntaxError,
    parse_headers,
    parse_redirects,
    parse_rule_file,
)
from assetcdn.shared.errors import ApiError

HEADERS = """\
# Security for everything
/*
  X-Frame-Options: DENY
  Cache-Control: public, max-age=60

/*.webp
  Cache-Control: immutable
  X-Robots-Tag: noindex

/:zone/v1/logos/*
  X-Zone: :zone
  X-Rest: :splat
  ! X-Frame-Options

https://:sub.example.com/*
  X-Host: :sub
"""


def errors_of(parse, text: str) -> tuple[int, str]:
    with pytest.raises(RulesSyntaxError) as caught:
        parse(text)
    return caught.value.line, caught.value.message


class TestHeaders:
    def test_blocks_combine_in_file_order(self) -> None:
        changes = parse_headers(HEADERS).for_path("/akande/v1/banners/x.webp")
        assert changes.set == {
            "X-Frame-Options": "DENY",
            "Cache-Control": "public, max-age=60, immutable",
            "X-Robots-Tag": "noindex",
        }
        assert changes.remove == frozenset()

    def test_placeholders_splat_and_detach(self) -> None:
        changes = parse_headers(HEADERS).for_path("akande/v1/logos/sub/logo.svg")
        assert changes.set == {
            "Cache-Control": "public, max-age=60",
            "X-Zone": "akande",
            "X-Rest": "sub/logo.svg",
        }
        assert changes.remove == frozenset({"x-frame-options"})

    def test_placeholder_matches_one_segment_only(self) -> None:
        rules = parse_headers("/:zone/logo.svg\n  X-A: :zone\n")
        assert rules.for_path("/a/logo.svg").set == {"X-A": "a"}
        assert not rules.for_path("/a/b/logo.svg")

    def test_absolute_url_needs_matching_host(self) -> None:
        rules = parse_headers(HEADERS)
        assert "X-Host" not in rules.for_path("/x.svg").set
        assert rules.for_path("/x.svg", host="cdn.example.com:8788").set["X-Host"] == "cdn"
        assert rules.for_path("/x.svg", host="CDN.Example.com").set["X-Host"] == "CDN"
        assert "X-Host" not in rules.for_path("/x.svg", host="a.b.example.com").set

    def test_header_set_again_after_detach(self) -> None:
        rules = parse_headers("/*\n  X-A: 1\n/a\n  ! x-a\n/a\n  X-A: 2\n")
        changes = rules.for_path("/a")
        assert changes.set == {"X-A": "2"}
        assert changes.remove == frozenset({"x-a"})

    def test_name_case_insensitive_join_keeps_first_spelling(self) -> None:
        rules = parse_headers("/*\n  Vary: Accept\n/*\n  vary: Save-Data\n")
        assert rules.for_path("/x").set == {"Vary": "Accept, Save-Data"}

    def test_query_string_is_ignored(self) -> None:
        assert parse_headers("/a.svg\n  X: y\n").for_path("/a.svg?v=2").set == {"X": "y"}

    def test_literal_regex_characters_are_escaped(self) -> None:
        rules = parse_headers("/a.b+c/(x)\n  X: y\n")
        assert rules.for_path("/a.b+c/(x)")
        assert not rules.for_path("/aXb+c/(x)")

    def test_unknown_colon_words_in_values_stay(self) -> None:
        rules = parse_headers("/:zone/*\n  Link: <https://x.test/:other>; rel=preload\n")
        assert rules.for_path("/z/a").set == {"Link": "<https://x.test/:other>; rel=preload"}

    def test_no_match_and_empty(self) -> None:
        # '/:zone/v1/logos/*' needs a segment after 'logos/'; only '/*' applies.
        assert parse_headers(HEADERS).for_path("/akande/v1/logos").remove == frozenset()
        assert not parse_headers("/a\n  X: 1\n").for_path("/b")
        assert not parse_headers("").for_path("/x")
        assert not parse_headers(None).for_path("/x")
        assert len(parse_headers(HEADERS)) == 4

    @pytest.mark.parametrize(("text", "line", "fragment"), [
        ("  X-A: 1\n", 1, "must follow a URL pattern"),
        ("/a\n", 1, "no indented header lines"),
        ("/a\n  X-A: 1\n/b\n\n# c\n/c\n  X: 1\n", 3, "no indented header lines"),
        ("a/b\n  X: 1\n", 1, "starting with '/'"),
        ("http://x.test/*\n  X: 1\n", 1, "https://"),
        ("https://x.test:8443/*\n  X: 1\n", 1, "port"),
        ("/a/*/b/*\n  X: 1\n", 1, "one '*'"),
        ("/:a/:a\n  X: 1\n", 1, "twice"),
        ("/a\n  X-A 1\n", 2, "Name: value"),
        ("/a\n  Bad Name: 1\n", 2, "not a valid header name"),
        ("/a\n  X-A:\n", 2, "no value"),
        ("/a\n  !\n", 2, "detach"),
        ("/a b\n  X: 1\n", 1, "spaces"),
        ("/a\n  X: " + "v" * 2000 + "\n", 2, "longer than"),
    ])
    def test_syntax_errors(self, text: str, line: int, fragment: str) -> None:
        got_line, message = errors_of(parse_headers, text)
        assert got_line == line
        assert fragment in message

    @pytest.mark.parametrize("line", ["Content-Type: text/plain, text/html", "content-type: text/html",
                                      "Content-Security-Policy: default-src *", "! Content-Security-Policy",
                                      "X-Content-Type-Options: sniff", "! x-content-type-options",
                                      "Content-Disposition: inline", "Set-Cookie: cdn_session=x; Path=/"])
    def test_headers_that_decide_how_a_browser_runs_a_file_are_refused(self, line: str) -> None:
        number, message = errors_of(parse_headers, f"/*\n  X-Frame-Options: DENY\n  {line}\n")
        assert number == 3 and "may not set or remove" in message

    @pytest.mark.parametrize("line", ["Content-Length: 2", "content-length: 0", "Transfer-Encoding: chunked",
                                      "! Content-Length", "Connection: close", "Content-Encoding: gzip",
                                      "Content-Range: bytes 0-1/2", "Trailer: X-A", "Upgrade: h2c"])
    def test_headers_that_frame_the_response_are_refused(self, line: str) -> None:
        number, message = errors_of(parse_headers, f"/*\n  X-Frame-Options: DENY\n  {line}\n")
        assert number == 3 and "framed" in message
        assert parse_headers(f"/*\n  X-Frame-Options: DENY\n  {line}\n", strict=False).for_path("/a").set == {
            "X-Frame-Options": "DENY"}

    def test_the_edge_skips_such_lines_of_a_file_published_before(self) -> None:
        text = ("/*\n  Content-Type: text/plain\n  Content-Type: text/html\n  X-Frame-Options: DENY\n"
                "/only/*\n  ! Content-Security-Policy\n")
        rules = parse_headers(text, strict=False)
        assert rules.for_path("/a").set == {"X-Frame-Options": "DENY"}
        assert not rules.for_path("/only/x").remove
        assert RuleSet.from_texts(text, None, strict=False).headers.for_path("/a").set == {"X-Frame-Options": "DENY"}

    def test_rule_count_limit(self) -> None:
        text = "".join(f"/p{i}\n  X: 1\n" for i in range(101))
        assert errors_of(parse_headers, text)[0] == 201
        assert len(parse_headers("".join(f"/p{i}\n  X: 1\n" for i in range(100)))) == 100


REDIRECTS = """\
# old paths
/old /new 301
/temp /elsewhere
/docs/* /guides/:splat 308
/blog/:year/:slug /posts/:year-:slug.html 302
/app/* /index.html 200
/old /never 302
/out https://example.com/landing?ref=cdn 307
/docs/exact /first-wins
"""


class TestRedirects:
    def test_static_with_status_and_default(self) -> None:
        rules = parse_redirects(REDIRECTS)
        found = rules.match("/old")
        assert (found.status, found.location, found.line) == (301, "/new", 2)
        assert rules.match("temp").status == 302
        assert rules.match("/nothing") is None

    def test_splat_and_placeholders(self) -> None:
        rules = parse_redirects(REDIRECTS)
        assert rules.match("/docs/a/b.html").location == "/guides/a/b.html"
        assert rules.match("/docs/a/b.html").status == 308
        assert rules.match("/blog/2026/hello").location == "/posts/2026-hello.html"
        assert rules.match("/blog/2026/hello/more") is None

    def test_first_match_in_file_order(self) -> None:
        rules = parse_redirects(REDIRECTS)
        # The dynamic '/docs/*' comes before the static '/docs/exact'.
        assert rules.match("/docs/exact").location == "/guides/exact"
        # The first of two static rules for the same source wins.
        assert rules.match("/old").location == "/new"

    def test_static_before_later_dynamic(self) -> None:
        rules = parse_redirects("/a/b /static\n/a/* /dynamic/:splat\n")
        assert rules.match("/a/b").location == "/static"
        assert rules.match("/a/c").location == "/dynamic/c"

    def test_rewrite(self) -> None:
        found = parse_redirects(REDIRECTS).match("/app/settings")
        assert found.is_rewrite
        assert (found.status, found.location) == (200, "/index.html")

    def test_query_string_handling(self) -> None:
        rules = parse_redirects(REDIRECTS + "/frag /target#top 301\n")
        assert rules.match("/old?x=1&y=2").location == "/new?x=1&y=2"
        assert rules.match("/out?x=1").location == "https://example.com/landing?ref=cdn"
        assert rules.match("/frag?x=1").location == "/target?x=1#top"

    def test_empty(self) -> None:
        assert parse_redirects("").match("/a") is None
        assert parse_redirects(None).match("/a") is None
        assert len(parse_redirects(REDIRECTS)) == 8

    @pytest.mark.parametrize(("rules", "path"), [
        ("/go/* /:splat", "/go//evil.example"),               # '//evil.example': scheme-relative
        ("/go/* /:splat", "/go//\\evil.example"),              # '/\\' is '//' to browsers
        ("/go/* /:splat", "/go//%09evil.example"),
        ("/go/* /:splat 200", "/go//evil.example"),           # a rewrite is held to the same
        ("/go/:a/* /:splat:a", "/go/x//y"),
        ("/go/* https://other.example:splat", "/go/@evil.example"),   # userinfo: the host would be evil.example
        ("/go/* https://other.example:splat", "/go/.evil.example%23"),
        ("/go/* https://other.example:splat", "/go//evil.example"),
        ("/go/:sub https://:sub.other.example/", "/go/evil.example%2F"),
        ("/go/:sub https://:sub.other.example/", "/go/evil.example:1@x"),
        ("/go/* //:splat.other.example", "/go/evil.example@x"),      # the host of a scheme-relative target
        ("/go/* ///:splat", "/go/evil.example"),              # an empty host: browsers take the next segment
    ])
    def test_a_value_never_moves_the_location_to_another_host(self, rules: str, path: str) -> None:
        redirects = parse_redirects(rules)
        assert redirects.matches(path)
        with pytest.raises(ApiError) as caught:
            redirects.match(path)
        assert (caught.value.status, caught.value.code, caught.value.target) == (400, "InvalidPath", "path")
        assert "line 1" in caught.value.message

    @pytest.mark.parametrize(("rules", "path", "location"), [
        ("/go/* /:splat", "/go/\\evil.example", "/%5Cevil.example"),
        ("/go/* /:splat", "/go/a\tb#c d\u00e9%zz?x=\\", "/a%09b%23c%20d%C3%A9%25zz?x=%5C"),
        ("/go/* /:splat", "/go/%2F%2Fevil.example", "/%2F%2Fevil.example"),  # escaped: a path segment to browsers
        ("/go/* /x/:splat", "/go//evil.example", "/x//evil.example"),
        ("/go/* https://other.example/:splat", "/go/@evil.example", "https://other.example/@evil.example"),
        ("/go/* https://other.example/:splat", "/go//evil.example", "https://other.example//evil.example"),
        ("/go/* https://other.example:splat", "/go/.cdn", "https://other.example.cdn"),
        ("/go/:sub https://:sub.other.example/", "/go/img", "https://img.other.example/"),
        ("/go/* https://user:pass@other.example/:splat", "/go/x", "https://user:pass@other.example/x"),
    ])
    def test_values_are_escaped_and_stay_in_their_part(self, rules: str, path: str, location: str) -> None:
        found = parse_redirects(rules).match(path)
        assert found is not None and found.location == location

    @pytest.mark.parametrize(("text", "line", "fragment"), [
        ("/a\n", 1, "<from> <to>"),
        ("/a /b 301 Country=fr\n", 1, "<from> <to>"),
        ("/a /b 404\n", 1, "not supported"),
        ("/a /b abc\n", 1, "not supported"),
        ("#c\n\n/a /b\nhttps://x.test/a /b\n", 4, "domain-level"),
        ("/a b\n", 1, "destination"),
        ("/a https://x.test/b 200\n", 1, "proxying"),
        ("/a /b/:splat\n", 1, ":splat"),
        ("/a/*/b/* /c\n", 1, "one '*'"),
        ("/:x/:x /c\n", 1, "twice"),
        ("/a /a 301\n", 1, "itself"),
        ("/a?x=1 /b\n", 1, "query"),
        ("/a /" + "b" * 1000 + "\n", 1, "at most"),
    ])
    def test_syntax_errors(self, text: str, line: int, fragment: str) -> None:
        got_line, message = errors_of(parse_redirects, text)
        assert got_line == line
        assert fragment in message

    def test_dynamic_rule_limit(self) -> None:
        text = "".join(f"/d{i}/* /x/:splat\n" for i in range(101))
        assert errors_of(parse_redirects, text)[0] == 101
        assert len(parse_redirects("".join(f"/s{i} /x\n" for i in range(2000)))) == 2000


class TestRuleSet:
    def test_from_texts(self) -> None:
        rules = RuleSet.from_texts(HEADERS, REDIRECTS)
        assert rules.redirects.match("/old").location == "/new"
        assert rules.headers.for_path("/x").set["X-Frame-Options"] == "DENY"

    def test_empty(self) -> None:
        rules = RuleSet.from_texts(None, "")
        assert rules.redirects.match("/old") is None
        assert not rules.headers.for_path("/x")
        assert EMPTY_RULES.redirects.match("/a") is None

    def test_error_carries_line(self) -> None:
        with pytest.raises(RulesSyntaxError) as caught:
            RuleSet.from_texts("/a\n  X: 1\n", "/a /b\n/c\n")
        assert caught.value.line == 2
        assert str(caught.value).startswith("line 2: ")

    def test_parse_rule_file(self) -> None:
        assert isinstance(parse_rule_file("_headers", "/a\n  X: 1\n"), HeaderRules)
        assert isinstance(parse_rule_file("_redirects", "/a /b\n"), RedirectRules)
        with pytest.raises(ValueError):
            parse_rule_file("_other", "")
