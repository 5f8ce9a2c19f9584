"""How the SDK reads an infer target to reach each replica (craftai.replicas): gRPC's naming rules,
and the addresses a name resolves to. The routing itself runs on real replicas behind one DNS name
and behind an address list: tests/containers/test_replicas.py."""

from __future__ import annotations

import pytest

from craftai.replicas import pinned_options
from craftai_wire.channels import client_options, target_options
from craftai_wire.targets import Target, balanced, parse_target, resolve


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("infer:50051", Target("dns", host="infer", port=50051, authority="infer:50051")),
        (
            "dns:///craftai-infer:50051",
            Target("dns", host="craftai-infer", port=50051, authority="craftai-infer:50051"),
        ),
        ("dns://10.0.0.10/infer:7", Target("dns", host="infer", port=7, authority="infer:7")),
        ("dns:infer", Target("dns", host="infer", port=443, authority="infer")),
        ("127.0.0.1:50063", Target("dns", host="127.0.0.1", port=50063, authority="127.0.0.1:50063")),
        ("[::1]:50051", Target("dns", host="::1", port=50051, authority="[::1]:50051")),
        (
            "ipv4:127.0.0.1:50063,127.0.0.1:50064",
            Target("list", listed=("ipv4:127.0.0.1:50063", "ipv4:127.0.0.1:50064")),
        ),
        ("ipv6:[::1]:5,[::2]", Target("list", listed=("ipv6:[::1]:5", "ipv6:[::2]:443"))),
        ("unix:/run/craftai.sock", Target("other")),
        ("xds:///craftai-infer", Target("other")),
        ("infer:not-a-port", Target("other")),
    ],
)
def test_targets_are_read_by_grpcs_naming_rules(target: str, expected: Target) -> None:
    assert parse_target(target) == expected


def test_a_name_resolves_to_every_address_once_and_a_list_as_listed() -> None:
    assert resolve(parse_target("127.0.0.1:50063")) == ["ipv4:127.0.0.1:50063"]
    assert "ipv4:127.0.0.1:7" in resolve(parse_target("dns:///localhost:7"))
    found = resolve(parse_target("localhost:7"))
    assert len(found) == len(set(found))
    assert resolve(parse_target("ipv4:10.0.0.1:1,10.0.0.2:1")) == ["ipv4:10.0.0.1:1", "ipv4:10.0.0.2:1"]
    assert resolve(parse_target("unix:/run/craftai.sock")) == []  # one endpoint: nothing to pin


def test_a_pinned_channel_keeps_the_limits_presents_the_services_name_and_does_not_balance() -> None:
    plain = client_options(1 << 20)
    spread = target_options(plain, "ipv4:10.0.0.1:1,10.0.0.2:1")
    assert spread[:-1] == plain and spread[-1][0] == "grpc.service_config"
    pinned = pinned_options(spread, "infer:50051")
    assert pinned == [*plain, ("grpc.default_authority", "infer:50051")]
    assert pinned_options(spread, "") == plain


def test_calls_are_balanced_on_dns_targets_and_several_addresses_only() -> None:
    """One server (loopback, one address, unix:) keeps one connection: a draining server answers
    SHUTTING_DOWN itself (tests/integration/test_faults.py)."""
    assert balanced("dns:///craftai-infer:50051") and balanced("dns:///127.0.0.1:50051")
    assert balanced("ipv4:10.0.0.1:1,10.0.0.2:1") and not balanced("ipv4:10.0.0.1:1")
    assert not balanced("127.0.0.1:50051") and not balanced("unix:/run/craftai.sock")
    assert not balanced("no-such-name.invalid:50051")  # not resolved: one endpoint, as gRPC will say
    assert target_options(client_options(1 << 20), "127.0.0.1:50051") == client_options(1 << 20)
