"""Which URLs a model may make the cluster fetch, and the only addresses a fetch may connect to.

A policy under training chooses URLs; on a training cluster those must not reach internal
services. `guard()` admits only http(s) URLs whose host, written once in its IDNA 2008 (UTS #46)
form, resolves to addresses that are all global: no private, shared (100.64/10), loopback,
link-local, multicast, reserved or documentation range, and no IPv6 address that embeds such an
IPv4 address (IPv4-mapped, -compatible, -translated, 6to4, Teredo, NAT64, ISATAP). Hosts in the
allow list skip the address check, nothing else. It returns the addresses it checked, and
`PinnedBackend` connects to those and nothing else, so a second DNS answer (rebinding) is never
used. Every redirect hop goes through `guard()` again (the fetcher does this).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpcore
import idna

from local_retriever.hosts import is_ip

METADATA_HOSTS = {"metadata.google.internal", "metadata", "instance-data"}
# Not global by RFC 8215 though Python < 3.12 says it is; where its IPv4 sits depends on the local prefix.
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")
_LAST32_NETS = [ipaddress.ip_network(n) for n in ("64:ff9b::/96", "::/96", "::ffff:0:0:0/96")]
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
MAX_HOST = 253
MAX_PINS = 4096


class BlockedURL(ValueError):
    pass


@dataclass(frozen=True)
class Target:
    url: str  # the URL to fetch: its host in the same ASCII form that was resolved and checked
    host: str  # that host as httpx will name it to the network backend (IPv6 without brackets)
    addresses: tuple[str, ...]  # what the host resolved to when checked: a fetch connects to these only


def refusal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why a connection to `ip` is refused, or None for a global unicast address."""
    # A 6to4 address (2002::/16) is as public as the IPv4 address it embeds, judged below: Python before 3.11.4 calls
    # the whole prefix private, later versions global.
    sixtofour = isinstance(ip, ipaddress.IPv6Address) and ip.sixtofour is not None
    if ip.is_multicast or not (ip.is_global or sixtofour) or ip in _LOCAL_NAT64:
        return f"the non-public address {ip}"
    for inner in _embedded_ipv4(ip):
        if inner.is_multicast or not inner.is_global:
            return f"the address {ip}, which embeds the non-public IPv4 address {inner}"
    return None


def _embedded_ipv4(ip) -> list[ipaddress.IPv4Address]:
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found = [a for a in (ip.ipv4_mapped, ip.sixtofour) if a is not None]
    if ip.teredo:
        found.extend(ip.teredo)
    value = int(ip)
    if any(ip in net for net in _LAST32_NETS) or (value >> 32) & 0xFDFFFFFF == 0x5EFE:  # ISATAP interface id
        found.append(ipaddress.IPv4Address(value & 0xFFFFFFFF))
    return found


def ascii_host(host: str) -> str:
    """`host` as the resolver and httpx will both see it: an IP literal, or lower-case A-labels (IDNA 2008)."""
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        pass
    if len(host) > 4 * MAX_HOST:
        raise BlockedURL(f"host name of {len(host)} characters is too long")
    try:
        name = host.lower() if host.isascii() else idna.encode(host, uts46=True, transitional=False).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError) as exc:
        raise BlockedURL(f"invalid host name {host[:200]!r}: {exc}") from None
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")
    if len(name) > MAX_HOST or not all(_LABEL.fullmatch(label) for label in labels):
        raise BlockedURL(f"invalid host name {host[:200]!r}")
    return name


async def resolve(host: str, port: int) -> list[str]:
    """The system resolver's addresses for an ASCII host (so no second IDNA codec runs)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def guard(url: str, allow_hosts: Iterable[str] = frozenset()) -> Target:
    """The checked target of `url`, or BlockedURL saying why it may not be fetched.

    A model writes these URLs, so anything malformed (a bad port, an unclosed IPv6 bracket, an
    over-long or empty host label, characters no resolver takes) is refused here rather than
    raising something else further down.
    """
    try:
        url.encode("utf-8")  # a lone surrogate is no text: httpx would fail on it with an error of its own
        parts = urlsplit(url.strip())
        port = parts.port
        raw_host = parts.hostname or ""
    except (ValueError, TypeError) as exc:
        raise BlockedURL(f"malformed URL {url[:200]!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise BlockedURL(f"only http(s) URLs can be accessed, not {parts.scheme[:20] or 'a bare string'!r}")
    if not raw_host:
        raise BlockedURL(f"no host in {url[:200]!r}")
    if port == 0:
        raise BlockedURL("port 0 cannot be connected to")
    host = ascii_host(raw_host)
    if host in METADATA_HOSTS or host.rstrip(".") in METADATA_HOSTS:
        raise BlockedURL(f"{host} is a cloud metadata service")
    netloc = f"[{host}]" if ":" in host else host
    fetch_url = urlunsplit(
        (parts.scheme, netloc + (f":{port}" if port is not None else ""), parts.path, parts.query, parts.fragment)
    )
    try:
        addresses = [host] if is_ip(host) else await resolve(host, port or (443 if parts.scheme == "https" else 80))
    except socket.gaierror as exc:
        raise BlockedURL(f"cannot resolve {host[:200]!r}: {exc.strerror}") from None
    except (UnicodeError, ValueError, OSError) as exc:
        raise BlockedURL(f"invalid host name {host[:200]!r}: {exc}") from None
    if not addresses:
        raise BlockedURL(f"{host} resolves to no address")
    if host not in {_allowed_form(h) for h in allow_hosts}:
        for addr in addresses:
            try:
                reason = refusal(ipaddress.ip_address(addr.split("%")[0]))
            except ValueError:
                reason = f"the unparsable address {addr[:60]!r}"
            if reason:
                raise BlockedURL(f"{host} resolves to {reason}")
    return Target(fetch_url, host, tuple(addresses))


async def check_url(url: str, allow_hosts: Iterable[str] = frozenset()) -> str:
    """The URL to fetch if `url` may be fetched (host in its checked form), else raises BlockedURL."""
    return (await guard(url, allow_hosts)).url


def _allowed_form(host: str) -> str:
    try:
        return ascii_host(host.strip().strip("[]"))
    except BlockedURL:
        return host.lower()


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses `guard()` returned for the host, so httpx never resolves a name itself."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend):
        self.inner = inner
        self.pins: dict[str, tuple[str, ...]] = {}

    def pin(self, target: Target) -> None:
        self.pins.pop(target.host, None)
        self.pins[target.host] = target.addresses
        while len(self.pins) > MAX_PINS:
            self.pins.pop(next(iter(self.pins)))

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        addresses = self.pins.get(host)
        if not addresses:
            raise httpcore.ConnectError(f"{host} was not checked by the URL guard")
        error: Exception | None = None
        for addr in addresses:
            try:
                return await self.inner.connect_tcp(
                    addr, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        raise error

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)
