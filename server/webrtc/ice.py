"""Which host addresses the server's ICE agents offer.

aioice (aiortc's ICE) offers every interface's address but loopback's and has no setting for it. A server
on a machine with several interfaces, or a test in a network namespace holding only loopback, needs to
name them; ``offer_only`` replaces aioice's address lookup, for the whole process (every peer connection
of this server), with the addresses named.
"""

from __future__ import annotations

import ipaddress

import aioice.ice


def offer_only(addresses: tuple[str, ...]) -> None:
    """Gather host candidates on ``addresses`` only (``ValueError`` for one that is not an IP address)."""
    parsed = [ipaddress.ip_address(a) for a in addresses]

    def host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        return [str(a) for a in parsed if (a.version == 4 and use_ipv4) or (a.version == 6 and use_ipv6)]

    aioice.ice.get_host_addresses = host_addresses
