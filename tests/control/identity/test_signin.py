"""Dashboard sign-in with the password: the page, the cookies, the per-IP failure limit, sign-out,
and the session as an auth scheme (Storage GET and passkey management, CSRF-checked changes)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from assetcdn.control.identity.dashboard_config import DashboardConfig
from assetcdn.control.identity.session import session_cookie_value
from assetcdn.control.records.service import AUDIT
from assetcdn.shared.config import load_settings
from assetcdn.shared.secrets import SECRETS_FILE, load_or_create_secrets
from tests.control.expect import expect_error
from tests.control.identity.signin_client import (  # noqa: F401 (make_control is a fixture)
    IP_ORIGIN,
    ORIGIN,
    PASSWORD,
    cookies_set,
    make_control,
    password_login,
    session_from,
    signed_in,
    with_session,
)
from tests.support.control import ACCESS, ACCOUNT, SECRETS, forwarded_for

WEEK = 7 * 24 * 3600
SESSION_VALUE = re.compile(r"^(\d+)\.([0-9a-f]{32})\.([0-9a-f]{64})$")


@pytest.fixture
async def control(make_control) -> TestClient:  # type: ignore[no-untyped-def]  # noqa: F811
    return await make_control()


async def audit_entries(client: TestClient, action: str) -> list[dict]:
    return await client.app[AUDIT].entries(days=1, action=action, limit=100)


class TestLoginPage:
    async def test_get_serves_a_form_with_its_own_script_only(self, control: TestClient) -> None:
        resp = await control.get("/dashboard/login")
        assert resp.status == 200
        assert resp.content_type == "text/html"
        page = await resp.text()
        assert '<form method="post" action="/dashboard/login"' in page and 'name="password"' in page
        assert '<script src="/dashboard/login.js"' in page and "navigator.credentials" not in page
        assert re.findall(r"<script[^>]*src=\"([^\"]+)\"", page) == ["/dashboard/login.js"]
        csp = resp.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert resp.headers["Cache-Control"] == "no-store"
        script = await control.get("/dashboard/login.js")
        assert script.status == 200 and script.content_type == "text/javascript"
        assert "navigator.credentials.get" in await script.text()
        assert (await control.get("/dashboard/login.css")).content_type == "text/css"

    async def test_passkey_pages_need_a_session(self, control: TestClient) -> None:
        for path in ("/dashboard/setup-passkey", "/dashboard/"):
            resp = await control.get(path, allow_redirects=False)
            assert (resp.status, resp.headers["Location"]) == (302, "/dashboard/login")
        session = await signed_in(control)
        resp = await control.get("/dashboard/setup-passkey", headers=with_session(session, origin=None))
        assert resp.status == 200 and "passkey-add" in await resp.text()


class TestPasswordLogin:
    async def test_right_password_sets_the_cookies_of_the_contract(self, control: TestClient) -> None:
        before = int(time.time())
        resp = await password_login(control)
        assert resp.status == 302
        assert resp.headers["Location"] == "/dashboard/setup-passkey"  # no passkey yet
        session, logged_in, clearing = cookies_set(resp)
        value = session.split(";", 1)[0].removeprefix("cdn_session=")
        match = SESSION_VALUE.match(value)
        assert match, session
        assert before + WEEK <= int(match[1]) <= int(time.time()) + WEEK
        assert session.split("; ")[1:] == ["Path=/", "HttpOnly", "Secure", "SameSite=Strict", f"Max-Age={WEEK}"]
        assert logged_in == f"cdn_logged_in=1; Path=/; Secure; SameSite=Strict; Max-Age={WEEK}"
        assert clearing.startswith("cdn_session=; Path=/dashboard; HttpOnly; Secure; SameSite=Strict; Max-Age=0")
        # Two sign-ins, two sessions.
        assert session_from(await password_login(control)) != value

    async def test_the_session_reads_storage_and_passkeys_but_opens_nothing_else(self, control: TestClient) -> None:
        resp = await control.post("/api/core/zones", json={"Name": "akande"}, headers=ACCOUNT)
        assert resp.status == 201
        session = await signed_in(control)
        assert (await control.get("/api/storage/akande/v1/", headers=with_session(session, origin=None))).status == 200
        assert (await control.get("/api/passkeys", headers=with_session(session, origin=None))).status == 200
        # The dashboard's routes accept it (assetcdn.control.app); the others do not, even from the dashboard's origin.
        for method, path in (("POST", "/api/pipeline"), ("GET", "/api/analytics"), ("GET", "/metrics"),
                             ("GET", "/api/health?deep=1")):
            resp = await control.request(method, path, headers=with_session(session), json={})
            assert resp.status == 401, (method, path)

    async def test_wrong_password_is_a_401_page_without_cookies_and_is_audited(self, control: TestClient) -> None:
        resp = await password_login(control, "not the password", **{"User-Agent": "pytest-signin"})
        assert resp.status == 401
        assert resp.content_type == "text/html"
        assert "Wrong password" in await resp.text()
        assert cookies_set(resp) == []
        [entry] = await audit_entries(control, "login.failure")
        assert entry["ip"] == "127.0.0.1" and entry["userAgent"] == "pytest-signin"
        assert entry["meta"] == {"method": "password", "reason": "wrong password"}
        assert "not the password" not in str(await audit_entries(control, "login"))
        await password_login(control)
        [success] = await audit_entries(control, "login.success")
        assert success["meta"] == {"method": "password"}
        assert PASSWORD not in str(await audit_entries(control, "login"))

    @pytest.mark.parametrize("form", [{}, {"password": ""}, {"pass": PASSWORD}, {"password": "x" * 2000}])
    async def test_missing_or_odd_passwords_are_refused(self, control: TestClient, form: dict) -> None:
        resp = await control.post("/dashboard/login", data=form, allow_redirects=False)
        assert resp.status == 401 and cookies_set(resp) == []

    async def test_an_oversized_form_is_413_and_not_read(self, control: TestClient) -> None:
        resp = await control.post("/dashboard/login", data={"password": "x" * 20_000}, allow_redirects=False)
        await expect_error(resp, 413, "PayloadTooLarge")

    async def test_without_a_dashboard_secret_no_password_works(self, make_control) -> None:  # noqa: F811
        control = await make_control(secrets=SECRETS)  # dashboard_secret empty
        for password in ("", "x", PASSWORD):
            assert (await password_login(control, password)).status == 401

    async def test_a_cross_site_form_post_is_refused_before_counting(self, control: TestClient) -> None:
        for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"},
                        {"Origin": ORIGIN, "Sec-Fetch-Site": "cross-site"}):
            resp = await password_login(control, **headers)
            assert resp.status == 403 and cookies_set(resp) == []
        assert await audit_entries(control, "login") == []
        # The dashboard's own origins (both defaults for make run) sign in.
        for origin in (ORIGIN, IP_ORIGIN):
            resp = await password_login(control, Origin=origin, **{"Sec-Fetch-Site": "same-origin"})
            assert resp.status == 302

    async def test_secure_can_be_turned_off_for_plain_http_elsewhere(self, make_control) -> None:  # noqa: F811
        control = await make_control(ASSETCDN_DASHBOARD_SECURE_COOKIES="false")
        resp = await password_login(control)
        assert resp.status == 302
        assert all("Secure" not in cookie for cookie in cookies_set(resp))
        assert all("SameSite=Strict" in cookie for cookie in cookies_set(resp))

    async def test_plain_http_on_another_host_is_explained_instead_of_looping(self, make_control) -> None:  # noqa: F811
        """A browser drops a Secure cookie set over plain HTTP on a host that is not localhost or a loopback address:
        signing in there led back to the sign-in page without a word. The page now says why, and sets nothing."""
        control = await make_control(ASSETCDN_DASHBOARD_PUBLIC_URL="http://cdn.test:8787")
        resp = await password_login(control, Origin="http://cdn.test:8787")
        assert (resp.status, cookies_set(resp)) == (403, [])
        text = await resp.text()
        assert "Secure" in text and "secure_cookies = false" in text and "HTTPS" in text
        assert await audit_entries(control, "login") == []

    @pytest.mark.parametrize("env, origin", [
        ({"ASSETCDN_DASHBOARD_PUBLIC_URL": "https://cdn.test"}, "https://cdn.test"),
        ({"ASSETCDN_DASHBOARD_PUBLIC_URL": "http://cdn.test:8787", "ASSETCDN_DASHBOARD_SECURE_COOKIES": "false"},
         "http://cdn.test:8787"),
        ({"ASSETCDN_DASHBOARD_PUBLIC_URL": "http://dash.localhost:8787"}, "http://dash.localhost:8787"),
        ({"ASSETCDN_DASHBOARD_ORIGINS": "http://127.0.0.2:8787,http://[::1]:8787"}, "http://127.0.0.2:8787"),
        ({"ASSETCDN_DASHBOARD_ORIGINS": "http://127.0.0.2:8787,http://[::1]:8787"}, "http://[::1]:8787"),
    ])
    async def test_where_browsers_keep_the_cookie_the_sign_in_goes_through(self, make_control, env: dict[str, str],  # noqa: F811
                                                                          origin: str) -> None:
        control = await make_control(**env)
        resp = await password_login(control, Origin=origin)
        assert resp.status == 302, await resp.text()


class TestFailureLimit:
    async def test_five_failures_then_429_with_retry_after_even_for_the_right_password(
            self, control: TestClient) -> None:
        for _ in range(5):
            assert (await password_login(control, "guess")).status == 401
        for password in ("guess", PASSWORD):
            resp = await password_login(control, password)
            assert resp.status == 429
            assert resp.content_type == "text/html"
            assert 0 < int(resp.headers["Retry-After"]) <= 900
            assert cookies_set(resp) == []
        assert len(await audit_entries(control, "login.failure")) == 5  # refusals are not audited

    async def test_the_count_is_per_client_ip(self, control: TestClient) -> None:
        # Control believes the X-Forwarded-For an edge signed.
        for _ in range(5):
            await password_login(control, "guess", **forwarded_for("203.0.113.7"))
        assert (await password_login(control, **forwarded_for("203.0.113.7"))).status == 429
        assert (await password_login(control, **forwarded_for("198.51.100.9"))).status == 302
        assert (await password_login(control)).status == 302

    async def test_only_failures_count(self, control: TestClient) -> None:
        for _ in range(4):
            await password_login(control, "guess")
        for _ in range(3):
            assert (await password_login(control)).status == 302
        assert (await password_login(control, "guess")).status == 401
        assert (await password_login(control, "guess")).status == 429

    async def test_limit_and_window_are_configurable(self, make_control) -> None:  # noqa: F811
        control = await make_control(ASSETCDN_DASHBOARD_LOGIN_MAX_FAILURES="2",
                                     ASSETCDN_DASHBOARD_LOGIN_WINDOW_S="60")
        for _ in range(2):
            assert (await password_login(control, "guess")).status == 401
        resp = await password_login(control)
        assert resp.status == 429 and 0 < int(resp.headers["Retry-After"]) <= 60


class TestLogout:
    async def test_logout_clears_the_cookies_and_ends_the_session(self, control: TestClient) -> None:
        session = await signed_in(control)
        resp = await control.get("/dashboard/logout", headers=with_session(session, origin=None),
                                 allow_redirects=False)
        assert (resp.status, resp.headers["Location"]) == (302, "/dashboard/login")
        cleared = cookies_set(resp)
        assert [c.split("=", 1)[0] for c in cleared] == ["cdn_session", "cdn_logged_in", "cdn_session"]
        assert all("Max-Age=0" in c for c in cleared)
        # The cookie is dead on the server too: a copy kept by someone else no longer works.
        assert (await control.get("/api/passkeys", headers=with_session(session, origin=None))).status == 401
        assert [e["action"] for e in await audit_entries(control, "login")] == ["login.logout", "login.success"]
        # Without a session, logout still lands on the login page.
        resp = await control.get("/dashboard/logout", allow_redirects=False)
        assert resp.status == 302

    @pytest.mark.parametrize("site", ["cross-site", "same-site"])
    async def test_a_sign_out_link_on_another_site_signs_nobody_out(self, control: TestClient, site: str) -> None:
        """A page elsewhere (another site, or a stored file on the edges, same-site) linking to /dashboard/logout: the
        browser sends no SameSite=Strict cookie with it but applies the clearing cookies of the answer, so any page
        could sign the operator out. Such a request changes nothing and leads to the dashboard."""
        session = await signed_in(control)
        resp = await control.get("/dashboard/logout", headers={"Sec-Fetch-Site": site}, allow_redirects=False)
        assert (resp.status, resp.headers["Location"], cookies_set(resp)) == (302, "/dashboard/", [])
        assert (await control.get("/api/passkeys", headers=with_session(session, origin=None))).status == 200
        for own in ("same-origin", "none"):  # the dashboard's own link, and the address typed or bookmarked
            resp = await control.get("/dashboard/logout", headers={"Sec-Fetch-Site": own}, allow_redirects=False)
            assert (resp.status, resp.headers["Location"]) == (302, "/dashboard/login")
            assert len(cookies_set(resp)) == 3


class TestSessionScheme:
    async def test_changes_with_the_session_need_the_dashboards_origin(self, control: TestClient) -> None:
        session = await signed_in(control)
        refused = [
            with_session(session, origin=None),
            with_session(session, origin="https://evil.example"),
            with_session(session, origin="null"),
            with_session(session, origin="http://localhost:9999"),
            with_session(session, **{"Sec-Fetch-Site": "same-site"}),
            with_session(session, **{"Sec-Fetch-Site": "cross-site"}),
        ]
        for headers in refused:
            resp = await control.post("/api/passkeys/register/begin", headers=headers)
            body = await expect_error(resp, 403, "Forbidden")
            assert ORIGIN in body["Message"], headers
            await expect_error(await control.delete("/api/passkeys?id=x", headers=headers), 403, "Forbidden")
        for origin in (ORIGIN, IP_ORIGIN):
            headers = with_session(session, origin=origin, **{"Sec-Fetch-Site": "same-origin"})
            assert (await control.post("/api/passkeys/register/begin", headers=headers)).status == 200

    async def test_a_forged_expired_or_overlong_session_is_401(self, control: TestClient) -> None:
        await signed_in(control)
        for cookie in (session_cookie_value(SECRETS.session_secret, ttl=-5),
                       session_cookie_value("another-secret"),
                       session_cookie_value(SECRETS.session_secret, ttl=400 * 24 * 3600),
                       "1.2.3"):
            resp = await control.get("/api/passkeys", headers=with_session(cookie, origin=None))
            await expect_error(resp, 401, "Unauthorized")

    async def test_keys_still_work_where_the_session_is_accepted(self, control: TestClient) -> None:
        assert (await control.get("/api/passkeys", headers=ACCOUNT)).status == 200
        assert (await control.get("/api/passkeys", headers=ACCESS)).status == 401
        assert (await control.post("/api/passkeys/register/begin", headers=ACCOUNT)).status == 200
        await expect_error(await control.post("/api/passkeys/register/begin", headers=ACCESS), 401, "Unauthorized")


class TestConfiguration:
    def test_make_run_defaults_allow_the_ip_and_localhost(self) -> None:
        config = DashboardConfig.from_settings(load_settings(environ={}), "http://127.0.0.1:8788")
        assert config.origins == ("http://127.0.0.1:8788", "http://localhost:8788")
        assert config.rp_id == "localhost"
        assert (config.secure_cookies, config.session_ttl_s) == (True, WEEK)
        assert (config.login_max_failures, config.login_window_s) == (5, 900)

    def test_a_public_domain_is_the_relying_party(self) -> None:
        config = DashboardConfig.from_settings(load_settings(environ={}), "https://cdn.example.com/")
        assert (config.origins, config.rp_id) == (("https://cdn.example.com",), "cdn.example.com")
        settings = load_settings(environ={"ASSETCDN_DASHBOARD_ORIGINS": "https://Admin.Example.com:443, "
                                                                        "http://localhost:8788/",
                                          "ASSETCDN_DASHBOARD_PASSKEY_RP_ID": "example.com"})
        config = DashboardConfig.from_settings(settings, "https://cdn.example.com")
        assert config.origins == ("https://admin.example.com", "http://localhost:8788")
        assert config.rp_id == "example.com"

    @pytest.mark.parametrize("env", [{"ASSETCDN_DASHBOARD_PASSKEY_RP_ID": "127.0.0.1"},
                                     {"ASSETCDN_DASHBOARD_ORIGINS": "https://example.com/dashboard"},
                                     {"ASSETCDN_DASHBOARD_ORIGINS": "ftp://example.com"},
                                     {"ASSETCDN_DASHBOARD_LOGIN_MAX_FAILURES": "0"}])
    def test_bad_values_stop_start_up(self, env: dict[str, str]) -> None:
        with pytest.raises(ValueError):
            DashboardConfig.from_settings(load_settings(environ=env), "http://127.0.0.1:8788")

    def test_the_dashboard_secret_is_generated_once_into_secrets_env(self, tmp_path: Path) -> None:
        first, generated = load_or_create_secrets(tmp_path / "data", environ={})
        assert "ASSETCDN_DASHBOARD_SECRET" in generated and len(first.dashboard_secret) >= 32
        assert f"ASSETCDN_DASHBOARD_SECRET={first.dashboard_secret}" in (tmp_path / "data" / SECRETS_FILE).read_text()
        again, generated = load_or_create_secrets(tmp_path / "data", environ={})
        assert again.dashboard_secret == first.dashboard_secret and generated == []
        chosen, _ = load_or_create_secrets(tmp_path / "data", environ={"ASSETCDN_DASHBOARD_SECRET": "mine"})
        assert chosen.dashboard_secret == "mine"
