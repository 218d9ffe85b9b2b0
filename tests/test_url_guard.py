"""The URL guard against bypasses, with a stand-in resolver and servers on loopback addresses only.

127.0.0.2 plays a public web site (the tests tell the guard to take it for a global address) and
127.0.0.3 an internal service on the same port: a fetch that ends at 127.0.0.3 got past the guard.
The stand-in replaces `socket.getaddrinfo`, which both the guard and httpx's own connect would use,
so a second resolution by httpx is seen as it would be on a real network.
"""

import asyncio
import ipaddress
import shutil
import socket
import subprocess
import threading
import time
from unittest import mock

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, RedirectResponse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from asearcher_plugin.tools import url_guard
from asearcher_plugin.tools.base import ToolError
from asearcher_plugin.tools.config import ToolsConfig
from asearcher_plugin.tools.url_guard import BlockedURL, check_url, guard
from asearcher_plugin.tools.web import WebToolBox

PUBLIC, INTERNAL = "127.0.0.2", "127.0.0.3"


def site(name: str) -> FastAPI:
    app = FastAPI()
    app.state.hosts = []

    @app.get("/{path:path}")
    async def page(path: str, request: Request):
        app.state.hosts.append(request.headers.get("host"))
        if path.startswith("redirect/"):
            return RedirectResponse(f"http://{path.removeprefix('redirect/')}")
        return PlainTextResponse(f"{name} page")

    return app


def _port_free_on_both() -> int:
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind((PUBLIC, 0))
            port = a.getsockname()[1]
            try:
                b.bind((INTERNAL, port))
            except OSError:
                continue
            return port
    raise RuntimeError("no port free on both loopback addresses")


class Servers:
    """The public and the internal site, on one port at two loopback addresses."""

    def __init__(self):
        self.port = _port_free_on_both()
        self.public, self.internal = site("public"), site("internal")
        self._servers = []
        for host, app in ((PUBLIC, self.public), (INTERNAL, self.internal)):
            server = uvicorn.Server(
                uvicorn.Config(app, host=host, port=self.port, log_level="warning", access_log=False)
            )
            threading.Thread(target=server.run, daemon=True).start()
            self._servers.append(server)
        deadline = time.monotonic() + 30
        while not all(s.started for s in self._servers):
            if time.monotonic() > deadline:
                raise RuntimeError("test servers did not start")
            time.sleep(0.02)

    def close(self):
        for s in self._servers:
            s.should_exit = True


@pytest.fixture(scope="module")
def servers():
    s = Servers()
    yield s
    s.close()


class StandInResolver:
    """`socket.getaddrinfo` for test names (answers may change per call, as a rebinding DNS server's do).

    A `str` name is encoded with Python's `idna` codec (IDNA 2003) first, as the C function does.
    Every other name is refused, so nothing leaves loopback.
    """

    def __init__(self, answers: dict[str, list[str]]):
        self.answers, self.asked = answers, []
        self.real = socket.getaddrinfo

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        raw = host.decode("ascii") if isinstance(host, bytes) else host
        try:
            ipaddress.ip_address(raw)
            return self.real(raw, port, family, type, proto, flags)  # numeric: no lookup
        except ValueError:
            pass
        name = (host.encode("idna") if isinstance(host, str) else host).decode("ascii").rstrip(".")
        self.asked.append(name)
        queue = self.answers.get(name)
        if not queue:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        addr = queue.pop(0) if len(queue) > 1 else queue[0]
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        sockaddr = (addr, int(port or 0), 0, 0) if fam == socket.AF_INET6 else (addr, int(port or 0))
        return [(fam, socket.SOCK_STREAM, 6, "", sockaddr)]


@pytest.fixture()
def resolver(monkeypatch):
    def install(answers):
        stand_in = StandInResolver(answers)
        monkeypatch.setattr(socket, "getaddrinfo", stand_in)
        return stand_in

    real_refusal = url_guard.refusal
    # 127.0.0.2 plays a public address; every other address keeps the real policy.
    monkeypatch.setattr(url_guard, "refusal", lambda ip: None if str(ip) == PUBLIC else real_refusal(ip))
    return install


def toolbox(tmp_path, allow=()) -> WebToolBox:
    cfg = ToolsConfig(backend="web")
    cfg.web.cache_dir = str(tmp_path / "cache")
    cfg.web.allow_private_hosts = list(allow)
    cfg.web.per_host_rps = 1000
    cfg.web.retries = 0
    cfg.web.timeout = 5
    return WebToolBox(cfg)


async def fetch(box: WebToolBox, url: str):
    try:
        return await box.access(url)
    except ToolError as exc:
        return f"ToolError: {exc}"
    finally:
        await box.aclose()


# --- DNS rebinding ------------------------------------------------------------------------------------


def test_rebinding_connects_to_the_checked_address(servers, resolver, tmp_path, monkeypatch):
    monkeypatch.delenv("JINA_API_KEY", raising=False)
    dns = resolver({"rebind.test": [PUBLIC, INTERNAL]})  # first answer public, every later one internal
    before = len(servers.internal.state.hosts)
    text = asyncio.run(fetch(toolbox(tmp_path), f"http://rebind.test:{servers.port}/x"))
    assert text == "public page"
    assert len(servers.internal.state.hosts) == before
    assert dns.asked == ["rebind.test"]  # httpx never resolved the name again
    assert servers.public.state.hosts[-1] == f"rebind.test:{servers.port}"  # Host header kept


def test_every_redirect_hop_is_checked(servers, resolver, tmp_path, monkeypatch):
    monkeypatch.delenv("JINA_API_KEY", raising=False)
    resolver({"start.test": [PUBLIC], "inside.test": [INTERNAL]})
    port, before = servers.port, len(servers.internal.state.hosts)
    for hop in (f"inside.test:{port}/x", f"{INTERNAL}:{port}/x", f"[::ffff:{INTERNAL}]:{port}/x", "127.0.0.2:99999/x"):
        text = asyncio.run(fetch(toolbox(tmp_path), f"http://start.test:{port}/redirect/{hop}"))
        assert text.startswith("ToolError: access refused"), (hop, text)
    assert len(servers.internal.state.hosts) == before


def serve_tls(app, cert, key) -> tuple[uvicorn.Server, int]:
    with socket.socket() as probe:
        probe.bind((PUBLIC, 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=PUBLIC,
            port=port,
            log_level="warning",
            access_log=False,
            ssl_certfile=str(cert),
            ssl_keyfile=str(key),
        )
    )
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("TLS test server did not start")
        time.sleep(0.02)
    return server, port


def test_https_to_a_pinned_address_verifies_the_name(resolver, tmp_path, monkeypatch):
    """Connected by address, the TLS handshake still names the host (SNI) and checks its certificate for it."""
    import certifi

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=pinned.test",
            "-addext",
            "subjectAltName=DNS:pinned.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    monkeypatch.setattr(certifi, "where", lambda: str(cert))  # the only CA httpx trusts in this test
    monkeypatch.delenv("JINA_API_KEY", raising=False)
    resolver({"pinned.test": [PUBLIC], "other.test": [PUBLIC]})
    app = site("tls")
    server, port = serve_tls(app, cert, key)
    try:
        assert asyncio.run(fetch(toolbox(tmp_path), f"https://pinned.test:{port}/x")) == "tls page"
        assert app.state.hosts == [f"pinned.test:{port}"]
        # Same address, a name the certificate does not hold: refused by the certificate check.
        text = asyncio.run(fetch(toolbox(tmp_path), f"https://other.test:{port}/x"))
        assert text.startswith("ToolError: access failed") and "ConnectError" in text
        assert app.state.hosts == [f"pinned.test:{port}"]
    finally:
        server.should_exit = True


# --- IDNA 2003 vs 2008 -----------------------------------------------------------------------------------


def test_idna_2008_form_is_checked_and_fetched(servers, resolver, tmp_path, monkeypatch):
    """`faß.test`: IDNA 2003 maps it to fass.test, IDNA 2008 (httpx) to xn--fa-hia.test."""
    monkeypatch.delenv("JINA_API_KEY", raising=False)
    dns = resolver({"fass.test": [PUBLIC], "xn--fa-hia.test": [INTERNAL]})
    text = asyncio.run(fetch(toolbox(tmp_path), f"http://faß.test:{servers.port}/x"))
    assert "access refused" in text and "xn--fa-hia.test" in text
    assert "fass.test" not in dns.asked and "xn--fa-hia.test" in dns.asked
    assert asyncio.run(check_url("http://FAß.test/a?b#c", {"xn--fa-hia.test"})) == "http://xn--fa-hia.test/a?b#c"
    dns.answers["xn--fa-hia.test"] = [PUBLIC]
    assert asyncio.run(fetch(toolbox(tmp_path), f"http://faß.test:{servers.port}/x")) == "public page"
    assert servers.public.state.hosts[-1] == f"xn--fa-hia.test:{servers.port}"


# --- ranges ----------------------------------------------------------------------------------------------

NON_GLOBAL = [
    "100.64.0.1",  # shared address space (carrier-grade NAT)
    "100.100.100.200",  # Alibaba Cloud metadata, inside 100.64/10
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "64:ff9b:1::a00:1",  # local-use NAT64
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:169.254.169.254",
    "::ffff:0:a00:1",  # IPv4-translated
    "::7f00:1",  # IPv4-compatible
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo with client 127.0.0.1
    "2a00:1450::5efe:a00:1",  # ISATAP interface id of 10.0.0.1
    "fd00:ec2::254",  # AWS metadata over IPv6
    "fe80::1",
    "fc00::1",
    "::1",
    "::",
    "ff02::1",
    "224.0.0.1",
    "239.255.255.250",
    "0.0.0.0",
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "192.0.0.170",
    "198.18.0.1",
    "192.0.2.1",
    "240.0.0.1",
    "255.255.255.255",
]


@pytest.mark.parametrize("addr", NON_GLOBAL)
def test_non_global_addresses_are_refused(addr, resolver):
    resolver({"host.test": [addr]})
    with pytest.raises(BlockedURL, match="non-public"):
        asyncio.run(guard("http://host.test/"))
    literal = f"[{addr}]" if ":" in addr else addr
    with pytest.raises(BlockedURL, match="non-public"):
        asyncio.run(guard(f"http://{literal}/"))


@pytest.mark.parametrize(
    "addr", ["8.8.8.8", "2001:4860:4860::8888", "2002:808:808::1", "64:ff9b::808:808", "::ffff:8.8.8.8"]
)
def test_global_addresses_pass(addr, resolver):
    resolver({"host.test": [addr]})
    target = asyncio.run(guard("http://host.test/"))
    assert target.addresses == (addr,) and target.host == "host.test"


def test_one_non_global_answer_refuses_the_host(resolver):
    """A name with one public and one private address is refused: the connect could use either."""
    resolver({"mixed.test": [PUBLIC]})
    real = socket.getaddrinfo

    def both(host, port, *a, **k):
        return real(host, port, *a, **k) + [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port))]

    with mock.patch.object(socket, "getaddrinfo", both), pytest.raises(BlockedURL, match="10.0.0.1"):
        asyncio.run(guard("http://mixed.test/"))


# --- the cache is read after the guard ------------------------------------------------------------------


def test_a_page_cached_under_an_allow_list_is_not_served_without_it(servers, resolver, tmp_path, monkeypatch):
    monkeypatch.delenv("JINA_API_KEY", raising=False)
    resolver({"intranet.test": [INTERNAL]})
    url = f"http://intranet.test:{servers.port}/doc"
    assert asyncio.run(fetch(toolbox(tmp_path, allow=["intranet.test"]), url)) == "internal page"
    hits = len(servers.internal.state.hosts)
    text = asyncio.run(fetch(toolbox(tmp_path), url))  # same cache directory, nothing allowed
    assert text.startswith("ToolError: access refused") and "127.0.0.3" in text
    assert asyncio.run(fetch(toolbox(tmp_path, allow=["intranet.test"]), url)) == "internal page"
    assert len(servers.internal.state.hosts) == hits  # the allowed re-read came from the cache


# --- property: whatever the text, BlockedURL or a target whose every address is global ------------------

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ANY_CHAR = st.one_of(st.characters(), SURROGATES, st.sampled_from(list("[]:@%./#?\\ \x00ßä")))
HOSTS = st.one_of(
    st.text(ANY_CHAR, max_size=30),
    st.sampled_from(
        [
            "example.org",
            "faß.test",
            "EXAMPLE.org.",
            "a..b",
            "xn--zz",
            "[::1",
            "::1]",
            "metadata",
            "[::ffff:127.0.0.1]",
            "127.1",
            "0x7f.0.0.1",
            "2130706433",
            "[fe80::1%25eth0]",
            "_x.test",
            "evil.test\\@127.0.0.1",
            "127.0.0.1\\@evil.test",
            "a.test#@b.test",
            "u:p@c.test",
            "a.test\tb",
        ]
    ),
    st.builds(
        lambda label, n: ".".join([label] * n),
        st.text(st.sampled_from("aä-ß"), min_size=1, max_size=70),
        st.integers(1, 6),
    ),
    st.ip_addresses().map(lambda ip: f"[{ip}]" if ip.version == 6 else str(ip)),
)
URLS = st.one_of(
    st.text(ANY_CHAR, max_size=200),
    st.builds(
        lambda scheme, host, port, path: f"{scheme}://{host}{port}/{path}",
        st.sampled_from(["http", "https", "HTTP", "ftp", "file", ""]),
        HOSTS,
        st.one_of(
            st.just(""),
            st.integers(-5, 70_000).map(lambda p: f":{p}"),
            st.text(ANY_CHAR, max_size=8).map(lambda p: f":{p}"),
        ),
        st.text(ANY_CHAR, max_size=40),
    ),
    st.builds(
        lambda c, n: "http://" + c * n,
        st.sampled_from(["a", "ä", "\ud800", "[", "a.", "%"]),
        st.integers(1000, 300_000),
    ),
)
ANSWERS = st.one_of(
    st.none(),
    st.lists(st.ip_addresses().map(str), min_size=1, max_size=4),
    st.lists(st.sampled_from(NON_GLOBAL + ["8.8.8.8", "2606:4700::1111"]), min_size=1, max_size=3),
)


def _oracle_global(addr: str) -> bool:
    """Independent of the guard's own code: global unicast, and so is any IPv4 address it carries."""
    ip = ipaddress.ip_address(addr.split("%")[0])
    if ip.is_multicast or not ip.is_global:
        return False
    if ip.version == 6:
        value = int(ip)
        inner = []
        if value >> 32 in (0, 0xFFFF, 0xFFFF0000, 0x64FF9B << 64):
            inner.append(value & 0xFFFFFFFF)
        if value >> 112 == 0x2002:
            inner.append((value >> 80) & 0xFFFFFFFF)
        if value >> 96 == 0x20010000:
            inner += [(value >> 64) & 0xFFFFFFFF, ~value & 0xFFFFFFFF]
        if value >> 80 == 0x64FF9B0001:
            return False
        if (value >> 32) & 0xFFFFFFFF in (0x5EFE, 0x2005EFE):
            inner.append(value & 0xFFFFFFFF)
        return all(ipaddress.IPv4Address(v).is_global and not ipaddress.IPv4Address(v).is_multicast for v in inner)
    return True


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(url=URLS, answers=ANSWERS, allow=st.booleans())
@example(url="HTTP://1.0.0.0/\ud800", answers=None, allow=False)  # found by this test: a lone surrogate in the path
def test_guard_property(url, answers, allow):
    asked = []

    async def stand_in(host, port):
        asked.append(host)
        if answers is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(answers)

    with mock.patch.object(url_guard, "resolve", stand_in):
        try:
            target = asyncio.run(guard(url, {"example.org"} if allow else frozenset()))
        except BlockedURL as exc:
            str(exc).encode("utf-8")  # the message becomes feedback text: no lone surrogates in it
            return
    assert all(h.isascii() for h in asked)  # only the one normalised form is ever resolved
    try:
        fetched = httpx.URL(target.url)
    except httpx.InvalidURL:  # httpx refuses it before any connection: a ToolError in the toolbox
        fetched = None
    if fetched is not None:  # httpx connects to the very host that was checked and pinned
        assert fetched.raw_host.decode("ascii") == target.host, (url, target)
    if allow and target.host == "example.org":
        return
    assert target.addresses and all(_oracle_global(a) for a in target.addresses), (url, target)


def test_the_page_client_connects_to_no_unchecked_host(servers, tmp_path):
    """Defence in depth: a request that skipped the guard finds no address to connect to."""
    from asearcher_plugin.tools.url_guard import MAX_PINS, Target

    async def run():
        box = toolbox(tmp_path)
        try:
            with pytest.raises(httpx.ConnectError, match="not checked by the URL guard"):
                await box.pages.get(f"http://{INTERNAL}:{servers.port}/x")
            for i in range(MAX_PINS + 10):
                box.pins.pin(Target(f"http://h{i}.test/", f"h{i}.test", (PUBLIC,)))
            return len(box.pins.pins), "h0.test" in box.pins.pins
        finally:
            await box.aclose()

    assert asyncio.run(run()) == (MAX_PINS, False)  # bounded: the oldest pins go first
