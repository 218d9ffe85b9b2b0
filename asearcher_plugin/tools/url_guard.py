"""Which URLs a model may make the cluster fetch.

A policy under training chooses URLs; on a training cluster those must not reach internal
services. Only http(s); the host is resolved and every address must be public (no private,
loopback, link-local, multicast, reserved or cloud-metadata ranges) unless the host is allowed
explicitly; every redirect hop is checked again by the fetcher.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

METADATA_HOSTS = {"metadata.google.internal", "metadata", "instance-data"}


class BlockedURL(ValueError):
    pass


def _is_public(addr: str) -> bool:
    ip = ipaddress.ip_address(addr.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return not (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_reserved
                or ip.is_unspecified or str(ip) == "100.100.100.200")  # Alibaba Cloud metadata


async def check_url(url: str, allow_hosts: frozenset[str] | set[str] = frozenset()) -> str:
    """Returns the URL if it may be fetched, else raises BlockedURL saying why.

    A model writes these URLs, so anything malformed (a bad port, an unclosed IPv6 bracket, an
    over-long or empty host label, characters no resolver takes) is refused here rather than
    raising something else further down.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
        host = (parts.hostname or "").lower()
    except ValueError as exc:
        raise BlockedURL(f"malformed URL {url[:200]!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise BlockedURL(f"only http(s) URLs can be accessed, not {parts.scheme[:20] or 'a bare string'!r}")
    if not host:
        raise BlockedURL(f"no host in {url[:200]!r}")
    if host in allow_hosts:
        return url
    if host in METADATA_HOSTS:
        raise BlockedURL(f"{host} is a cloud metadata service")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port or (443 if parts.scheme == "https" else 80),
                                                            type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise BlockedURL(f"cannot resolve {host[:200]!r}: {exc.strerror}") from None
    except (UnicodeError, ValueError, OSError) as exc:  # the IDNA codec refuses the name before any lookup
        raise BlockedURL(f"invalid host name {host[:200]!r}: {exc}") from None
    for info in infos:
        addr = info[4][0]
        if not _is_public(addr):
            raise BlockedURL(f"{host} resolves to the non-public address {addr}")
    return url
