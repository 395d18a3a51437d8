"""The Restore gate's checks table: every rule, every code, the quantity parser and the GPU
pairing (with Hypothesis), the legacy and header rules, and the privacy classes."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifecycle.machines.restore import QuantityError, parse_limit, parse_quantity
from lifecycle.machines.restore._checks import (
    CHECKS,
    FAIL,
    NA,
    PASS,
    RESERVED_IDS,
    SKIPPED,
    UNKNOWN,
    driver_major,
    evaluate,
    image_digest,
    kernel_major_minor,
    normalize_arch,
    pair_gpus,
    redact_digest,
)
from lifecycle.machines.restore._facts import (
    IMPL_NAMES,
    STATUS_CODES,
    CudaFacts,
    Gpu,
    GpuPair,
    Manifest,
    RestorePolicy,
    TargetFacts,
    Volume,
)

DIGEST = "sha256:" + "ab12" * 16
OTHER = "sha256:" + "cd34" * 16
PVC = Volume("/models", "PersistentVolumeClaim", "models")
#: What a legacy manifest cannot compare, in check order (both gates, listed once).
LEGACY_SKIPPED = (
    "host.cpuArch",
    "host.kernelVersion",
    "k8s.memoryLimit",
    "k8s.cpuLimit",
    "k8s.imageId",
    "cudaRestore.sourceGpus",
    "cudaRestore.sourceDriverVersion",
)


def manifest(**changes: object) -> Manifest:
    base: dict[str, object] = {
        "schema_version": 1,
        "cpu_arch": "amd64",
        "kernel_version": "6.8.0-1015-aws",
        "image_id": f"docker-pullable://registry.example/trainer@{DIGEST}",
        "memory_limit": "64Gi",
        "cpu_limit": "16",
        "ext_mounts": ("/", "/dev/shm", "/models"),
        "volumes": (PVC, Volume("/scratch", "EmptyDir")),
        "cuda": CudaFacts(
            pids=(42,),
            gpus=(Gpu("GPU-a", "NVIDIA L4"), Gpu("GPU-b", "Tesla T4")),
            driver_version="580.65.06",
        ),
    }
    base.update(changes)
    return Manifest(**base)  # type: ignore[arg-type]


def target(**changes: object) -> TargetFacts:
    base: dict[str, object] = {
        "cpu_arch": "amd64",
        "kernel_version": "6.8.0-1015-aws",
        "memory_limit": "65536Mi",
        "cpu_limit": "16000m",
        "image_id": DIGEST,
        "paths": ("/models", "/scratch"),
        "volumes": (PVC, Volume("/scratch", "EmptyDir")),
        "gpus": (Gpu("GPU-y", "Tesla T4"), Gpu("GPU-x", "NVIDIA L4")),
        "driver_version": "580.65.06",
    }
    base.update(changes)
    return TargetFacts(**base)  # type: ignore[arg-type]


def result(gate: str, check: str, m: Manifest | None = None, t: TargetFacts | None = None,
           policy: RestorePolicy | None = None):  # fmt: skip
    report = evaluate(gate, m or manifest(), t or target(), policy or RestorePolicy())
    return next(r for r in report.results if r.id == check)


# -- the table -------------------------------------------------------------------------------
def test_the_checks_table_runs_in_the_documented_order() -> None:
    assert [c.id for c in CHECKS if c.gate == "A"] == ["C5", "C7", "C7m", "C9", "C10"]
    assert [c.id for c in CHECKS if c.gate == "B"] == ["C12", "C11", "C1", "C2", "C3", "C3m"]
    assert set(RESERVED_IDS).isdisjoint(c.id for c in CHECKS)


def test_every_code_is_a_valid_condition_reason_and_maps_to_its_impl_name() -> None:
    reason = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    codes = {code for c in CHECKS for code in c.codes}
    assert codes == set(IMPL_NAMES)
    for code in (*codes, *STATUS_CODES):
        assert reason.match(code), code
        assert code[0].isupper()
        assert "-" not in code
    assert IMPL_NAMES["CpuArchMismatch"] == "cpu-arch"
    assert IMPL_NAMES["VolumeIdentityMismatch"] == IMPL_NAMES["VolumeMissing"] == "mount"


def test_a_compatible_target_passes_both_gates_with_the_pairing() -> None:
    a = evaluate("A", manifest(), target(), RestorePolicy())
    b = evaluate("B", manifest(), target(), RestorePolicy())
    assert a.verdict == b.verdict == PASS
    assert a.code == b.code == ""
    assert b.pairing == (
        GpuPair("NVIDIA L4", "GPU-a", "GPU-x"),
        GpuPair("Tesla T4", "GPU-b", "GPU-y"),
    )


# -- C5 cpu arch -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "node"), [("x86_64", "amd64"), ("aarch64", "arm64"), ("amd64", "x86_64")]
)
def test_c5_arch_aliases_match(source: str, node: str) -> None:
    assert result("A", "C5", manifest(cpu_arch=source), target(cpu_arch=node)).outcome == PASS


def test_c5_arch_mismatch() -> None:
    r = result("A", "C5", manifest(cpu_arch="aarch64"), target(cpu_arch="x86_64"))
    assert (r.outcome, r.code, r.detail) == (FAIL, "CpuArchMismatch", "snapshot arm64, node amd64")
    assert normalize_arch(" x86_64 ") == "amd64"


# -- C7 / C7m kernel -------------------------------------------------------------------------
def test_c7_kernel_is_compared_exactly() -> None:
    r = result(
        "A",
        "C7",
        manifest(kernel_version="6.8.0-1015-aws"),
        target(kernel_version="6.8.0-1016-aws"),
    )
    assert (r.outcome, r.code) == (FAIL, "KernelVersionMismatch")


@pytest.mark.parametrize(
    ("release", "outcome"),
    [("5.13.0", PASS), ("5.12.19", FAIL), ("6.1", PASS), ("4.19.0", FAIL), ("weird", NA)],
)
def test_c7m_kernel_floor(release: str, outcome: str) -> None:
    r = result("A", "C7m", manifest(kernel_version=release), target(kernel_version=release))
    assert r.outcome == outcome
    if outcome == FAIL:
        assert r.code == "KernelBelowMinimum"
    assert kernel_major_minor("5.13.0-rc1") == (5, 13)


# -- C9 / C10 limits as quantities -----------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "node", "outcome"),
    [
        ("64Gi", "65536Mi", PASS),
        ("64Gi", "68719476736", PASS),
        ("64Gi", "64G", FAIL),  # 64e9 < 64 * 2^30
        ("64G", "64Gi", PASS),
        ("1Gi", None, PASS),  # target unset = unlimited
        (None, "1Mi", NA),  # source unset = n/a
        ("1Gi", "1023Mi", FAIL),
    ],
)
def test_c9_memory_limit_is_a_quantity(source: str | None, node: str | None, outcome: str) -> None:
    r = result("A", "C9", manifest(memory_limit=source), target(memory_limit=node))
    assert r.outcome == outcome
    if outcome == FAIL:
        assert r.code == "MemoryLimitInsufficient"


@pytest.mark.parametrize(
    ("source", "node", "outcome"),
    [("16", "16000m", PASS), ("16000m", "16", PASS), ("1500m", "1.5", PASS), ("2", "1999m", FAIL)],
)
def test_c10_cpu_limit_is_a_quantity(source: str, node: str, outcome: str) -> None:
    r = result("A", "C10", manifest(cpu_limit=source), target(cpu_limit=node))
    assert r.outcome == outcome
    if outcome == FAIL:
        assert r.code == "CpuLimitInsufficient"


def test_a_malformed_recorded_limit_is_unknown_not_a_string_compare() -> None:
    r = result("A", "C9", manifest(memory_limit="64 GiB"), target())
    assert (r.outcome, r.code) == (UNKNOWN, "FactsIncomplete")


# -- C12 image digest ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "recorded",
    [DIGEST, f"docker-pullable://r.example/a/b@{DIGEST}", f"r.example:5000/other:v2@{DIGEST}"],
)
def test_c12_compares_digests_not_references(recorded: str) -> None:
    r = result("B", "C12", manifest(image_id=recorded), target(image_id=f"containerd://x@{DIGEST}"))
    assert r.outcome == PASS


def test_c12_digest_mismatch_is_redacted() -> None:
    r = result("B", "C12", manifest(), target(image_id=OTHER))
    assert (r.outcome, r.code) == (FAIL, "ImageDigestMismatch")
    assert r.detail == "snapshot sha256:ab12…, container sha256:cd34…"
    assert "registry.example" not in r.detail
    assert DIGEST not in r.detail


def test_c12_a_tag_only_reference_is_unknown() -> None:
    assert image_digest("registry.example/trainer:v1") is None
    r = result("B", "C12", manifest(image_id="registry.example/trainer:v1"), target())
    assert (r.outcome, r.code) == (UNKNOWN, "FactsIncomplete")
    assert result("B", "C12", manifest(), target(image_id="")).code == "TargetFactsUnavailable"


# -- C11 volumes -----------------------------------------------------------------------------
def test_c11_presence_ignores_the_mounts_criu_rebuilds() -> None:
    t = target(paths=("/models", "/scratch"), volumes=())
    policy = RestorePolicy(volumes="presence")
    assert result("B", "C11", manifest(), t, policy).outcome == PASS
    r = result("B", "C11", manifest(), target(paths=("/scratch",), volumes=()), policy)
    assert (r.outcome, r.code, r.detail) == (FAIL, "VolumeMissing", "/models missing")


def test_c11_identity_compares_kind_and_identifier_redacted() -> None:
    other = Volume("/models", "PersistentVolumeClaim", "models-v2")
    r = result("B", "C11", manifest(), target(volumes=(other, Volume("/scratch", "EmptyDir"))))
    assert (r.outcome, r.code) == (FAIL, "VolumeIdentityMismatch")
    assert "models" not in r.detail.replace("/models", "")
    assert "pvc#" in r.detail
    presence = result(
        "B", "C11", manifest(), target(volumes=(other,)), RestorePolicy(volumes="presence")
    )
    assert presence.outcome == PASS


def test_c11_ephemeral_kinds_compare_by_kind_only() -> None:
    src = manifest(volumes=(Volume("/scratch", "EmptyDir", "a"), Volume("/info", "DownwardAPI")))
    ok = target(volumes=(Volume("/scratch", "EmptyDir", "b"), Volume("/info", "DownwardAPI", "x")))
    assert result("B", "C11", src, ok).outcome == PASS
    wrong = target(
        volumes=(Volume("/scratch", "HostPath", "/var/tmp"), Volume("/info", "DownwardAPI"))
    )
    r = result("B", "C11", src, wrong)
    assert (r.outcome, r.code) == (FAIL, "VolumeIdentityMismatch")
    assert "/var/tmp" not in r.detail  # host paths are redacted


def test_c11_a_declared_volume_missing_on_the_target() -> None:
    r = result("B", "C11", manifest(ext_mounts=("/",)), target(paths=(), volumes=()))
    assert (r.outcome, r.code) == (FAIL, "VolumeMissing")


def test_volume_source_notation() -> None:
    assert Volume.from_source("/m", "PersistentVolumeClaim/models") == PVC.__class__(
        "/m", "PersistentVolumeClaim", "models"
    )
    assert Volume.from_source("/s", "EmptyDir") == Volume("/s", "EmptyDir", "")


# -- C1 / C2 GPUs ----------------------------------------------------------------------------
def test_c1_l4_t4_pairs_within_model_not_by_index() -> None:
    """Upstream #246: [L4, T4] -> [T4, L4] passes inventory but paired across models."""
    m = manifest(
        cuda=CudaFacts(
            pids=(1,), gpus=(Gpu("GPU-1", "L4"), Gpu("GPU-2", "T4")), driver_version="580.1"
        )
    )
    t = target(gpus=(Gpu("GPU-9", "T4"), Gpu("GPU-8", "L4")), driver_version="580.1")
    report = evaluate("B", m, t, RestorePolicy())
    assert report.verdict == PASS
    assert report.pairing == (GpuPair("L4", "GPU-1", "GPU-8"), GpuPair("T4", "GPU-2", "GPU-9"))


def test_c1_model_multiset_mismatch_and_c2_count() -> None:
    t = target(gpus=(Gpu("GPU-x", "NVIDIA L4"),))
    report = evaluate("B", manifest(), t, RestorePolicy())
    codes = [r.code for r in report.results if r.outcome == FAIL]
    assert codes == ["GpuModelMismatch", "GpuCountMismatch"]
    assert report.code == "GpuModelMismatch"
    assert report.pairing == ()
    assert "GpuCountMismatch (C2 gpu-count: snapshot 2, node 1)" in report.summary()


def test_c1_trims_names_and_an_unnamed_device_is_unknown() -> None:
    m = manifest(
        cuda=CudaFacts(
            pids=(1,),
            gpus=(Gpu("GPU-a", " NVIDIA L4 "), Gpu("GPU-b", "Tesla T4 ")),
            driver_version="580.65.06",
        )
    )
    assert result("B", "C1", m).outcome == PASS
    unnamed = manifest(
        cuda=CudaFacts(pids=(1,), gpus=(Gpu("GPU-a", " "),), driver_version="580.65.06")
    )
    assert (result("B", "C1", unnamed).outcome, result("B", "C1", unnamed).code) == (
        UNKNOWN,
        "FactsIncomplete",
    )


def test_gpu_checks_are_na_without_cuda_state() -> None:
    report = evaluate("B", manifest(cuda=None), target(gpus=()), RestorePolicy())
    assert [r.outcome for r in report.results if r.id in ("C1", "C2", "C3", "C3m")] == [NA] * 4
    assert report.verdict == PASS


def test_c2_source_zero_is_na_and_target_zero_is_a_mismatch() -> None:
    none = manifest(cuda=CudaFacts(pids=(1,), gpus=(), driver_version="580.1"))
    assert result("B", "C2", none, target(gpus=())).outcome == NA
    r = result("B", "C2", manifest(), target(gpus=()))
    assert (r.outcome, r.code) == (FAIL, "GpuCountMismatch")


# -- C3 / C3m driver -------------------------------------------------------------------------
def test_c3_driver_exact_build() -> None:
    m = manifest(
        cuda=CudaFacts(
            pids=(1,),
            gpus=(Gpu("GPU-a", "NVIDIA L4"), Gpu("GPU-b", "Tesla T4")),
            driver_version="560.35.03",
        )
    )
    r = result("B", "C3", m, target(driver_version="560.35.05"))
    assert (r.outcome, r.code) == (FAIL, "DriverVersionMismatch")


@pytest.mark.parametrize(
    ("driver", "outcome"), [("580.65.06", PASS), ("579.99", FAIL), ("600", PASS), ("n/a", NA)]
)
def test_c3m_driver_floor(driver: str, outcome: str) -> None:
    r = result("B", "C3m", t=target(driver_version=driver))
    assert r.outcome == outcome
    if outcome == FAIL:
        assert r.code == "DriverBelowMinimum"
    assert driver_major("580.65.06") == 580


# -- a gate runs every check; the first failure is primary -----------------------------------
def test_gate_a_runs_all_checks_first_failure_primary_message_lists_all() -> None:
    t = target(cpu_arch="arm64", kernel_version="5.10.0", memory_limit="1Gi", cpu_limit="1")
    report = evaluate("A", manifest(), t, RestorePolicy())
    assert [r.outcome for r in report.results] == [FAIL] * 5
    assert report.code == "CpuArchMismatch"
    summary = report.summary()
    assert summary.startswith("code=CpuArchMismatch gate=A: CpuArchMismatch (C5")
    for code in (
        "KernelVersionMismatch",
        "KernelBelowMinimum",
        "MemoryLimitInsufficient",
        "CpuLimitInsufficient",
    ):
        assert code in summary
    assert len(report.debug) == 5


def test_debug_lines_keep_full_values_for_debug_logs_only() -> None:
    report = evaluate("B", manifest(), target(image_id=OTHER), RestorePolicy())
    c12 = next(line for line in report.debug if line.startswith("C12"))
    assert OTHER in c12
    assert OTHER not in report.summary()
    assert redact_digest(None) == "none"


# -- manifest versions -----------------------------------------------------------------------
def test_a_legacy_manifest_compares_only_v0_facts() -> None:
    v0 = Manifest(ext_mounts=("/models",), cuda=CudaFacts(pids=(1,), gpu_uuids=("GPU-a", "GPU-b")))
    a = evaluate("A", v0, target(), RestorePolicy())
    b = evaluate("B", v0, target(), RestorePolicy())
    assert [(r.id, r.outcome) for r in a.results] == [
        ("C5", SKIPPED), ("C7", SKIPPED), ("C7m", PASS), ("C9", SKIPPED), ("C10", SKIPPED)
    ]  # fmt: skip
    assert {r.id: r.outcome for r in b.results} == {
        "C12": SKIPPED, "C11": PASS, "C1": SKIPPED, "C2": PASS, "C3": SKIPPED, "C3m": PASS
    }  # fmt: skip
    assert all(r.code == "LegacyManifest" for r in (*a.results, *b.results) if r.outcome == SKIPPED)
    assert a.verdict == b.verdict == PASS
    assert a.skipped_facts == LEGACY_SKIPPED
    wrong = evaluate("B", v0, target(gpus=(Gpu("GPU-x", "L4"),)), RestorePolicy())
    assert wrong.code == "GpuCountMismatch"


def test_header_problems_are_unknown() -> None:
    newer = evaluate("A", manifest(schema_version=2), target(), RestorePolicy())
    assert (newer.verdict, newer.code) == (UNKNOWN, "ManifestSchemaUnsupported")
    partial = evaluate("A", manifest(complete=False), target(), RestorePolicy())
    assert (partial.verdict, partial.code) == (UNKNOWN, "FactsIncomplete")
    gone = manifest(facts={"host.cpuArch": "unavailable:EACCES"})
    r = evaluate("A", gone, target(), RestorePolicy())
    assert (r.verdict, r.code) == (UNKNOWN, "FactsIncomplete")
    assert "host.cpuArch unavailable (EACCES)" in r.summary()
    empty = evaluate("A", manifest(kernel_version=""), target(), RestorePolicy())
    assert (empty.verdict, empty.code) == (UNKNOWN, "FactsIncomplete")


def test_a_mismatch_outranks_unknown_facts() -> None:
    m = manifest(facts={"host.kernelVersion": "unavailable:ENOENT"})
    r = evaluate("A", m, target(cpu_arch="arm64"), RestorePolicy())
    assert (r.verdict, r.code) == (FAIL, "CpuArchMismatch")


def test_fact_states_are_validated() -> None:
    with pytest.raises(ValueError, match="recorded"):
        Manifest(facts={"host.cpuArch": "maybe"})
    with pytest.raises(ValueError, match="negative"):
        Manifest(schema_version=-1)


# -- the quantity parser ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("a", "b"),
    [("64Gi", "65536Mi"), ("16", "16000m"), ("1k", "1000"), ("1e3", "1k"), ("1E3", "1000"),
     ("1.5", "1500m"), (".5", "500m"), ("1.", "1"), ("+2", "2"), ("1Ki", "1024"), ("1E", "1e18"),
     ("0.5Gi", "512Mi"), ("1e-3", "1m")],
)  # fmt: skip
def test_quantity_equivalences(a: str, b: str) -> None:
    assert parse_quantity(a) == parse_quantity(b)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        " 1",
        "1 ",
        "1GB",
        "1gi",
        "Gi",
        "1..0",
        "1e",
        "e3",
        "1.5.5",
        "--1",
        "1e1001",
        "١٢",
        "0x10",
    ],
)
def test_malformed_quantities_are_refused_clearly(bad: str) -> None:
    with pytest.raises(QuantityError, match=r"quantity|exponent"):
        parse_quantity(bad)


def test_limits_refuse_negatives_and_non_strings() -> None:
    assert parse_limit("0") == 0
    with pytest.raises(QuantityError, match="negative"):
        parse_limit("-1")
    with pytest.raises(QuantityError):
        parse_quantity(5)  # type: ignore[arg-type]


_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


@given(st.integers(0, 10**12), st.sampled_from(sorted(_BINARY)))
def test_binary_suffixes_are_powers_of_1024(n: int, suffix: str) -> None:
    assert parse_quantity(f"{n}{suffix}") == n * 1024 ** _BINARY[suffix]
    if _BINARY[suffix] > 1:
        smaller = next(s for s, p in _BINARY.items() if p == _BINARY[suffix] - 1)
        assert parse_quantity(f"{n}{suffix}") == parse_quantity(f"{n * 1024}{smaller}")


@given(st.integers(0, 10**12), st.sampled_from(sorted(_DECIMAL)))
def test_decimal_suffixes_and_exponents_agree(n: int, suffix: str) -> None:
    power = 3 * _DECIMAL[suffix]
    assert parse_quantity(f"{n}{suffix}") == parse_quantity(f"{n}e{power}") == n * 10**power
    assert parse_quantity(f"{n}") == parse_quantity(f"{n * 1000}m")


@given(st.decimals(min_value=0, max_value=10**9, places=3, allow_nan=False, allow_infinity=False))
def test_decimals_are_exact(value: object) -> None:
    text = format(value, "f")
    assert parse_quantity(text) == Fraction(str(value))


@given(st.text(max_size=12))
def test_arbitrary_text_parses_or_is_refused_never_crashes(text: str) -> None:
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert isinstance(value, Fraction)


# -- the GPU pairing -------------------------------------------------------------------------
_MODELS = st.sampled_from(["L4", "T4", "A100", "H100"])


@st.composite
def _gpu_sets(draw: st.DrawFn) -> tuple[list[Gpu], list[Gpu]]:
    models = draw(st.lists(_MODELS, max_size=8))
    uuids = draw(
        st.lists(
            st.text("0123456789abcdef", min_size=4, max_size=8),
            min_size=2 * len(models),
            max_size=2 * len(models),
            unique=True,
        )
    )
    source = [Gpu(f"GPU-{u}", m) for u, m in zip(uuids[: len(models)], models, strict=True)]
    target_models = draw(st.permutations(models))
    target = [Gpu(f"GPU-{u}", m) for u, m in zip(uuids[len(models) :], target_models, strict=True)]
    return source, target


@given(_gpu_sets(), st.randoms(use_true_random=False))
def test_pairing_is_a_bijection_within_each_model_and_independent_of_order(
    sets: tuple[list[Gpu], list[Gpu]], rnd: object
) -> None:
    source, target = sets
    pairing = pair_gpus(source, target)
    assert pairing is not None
    assert len(pairing) == len(source)
    assert sorted(p.source for p in pairing) == sorted(g.uuid for g in source)
    assert sorted(p.target for p in pairing) == sorted(g.uuid for g in target)
    model_of = {g.uuid: g.model for g in (*source, *target)}
    assert all(model_of[p.source] == model_of[p.target] == p.model for p in pairing)
    shuffled_s, shuffled_t = list(source), list(target)
    rnd.shuffle(shuffled_s)  # type: ignore[attr-defined]
    rnd.shuffle(shuffled_t)  # type: ignore[attr-defined]
    assert pair_gpus(shuffled_s, shuffled_t) == pairing


@given(_gpu_sets(), _MODELS)
def test_pairing_refuses_different_multisets(sets: tuple[list[Gpu], list[Gpu]], extra: str) -> None:
    source, target = sets
    assert pair_gpus([*source, Gpu("GPU-extra", extra)], target) is None


def test_pairing_refuses_duplicate_uuids() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        pair_gpus([Gpu("a", "L4"), Gpu("a", "L4")], [Gpu("b", "L4"), Gpu("c", "L4")])


# -- the operator's offline check ---------------------------------------------------------------
MANIFEST_YAML = f"""
artifact: {{contentUID: psc-41, containerName: main}}
compat: {{schemaVersion: 1, complete: true, facts: {{host.cpuArch: recorded}}}}
host: {{kernelVersion: 6.8.0-1015-aws, cpuArch: x86_64}}
k8s:
  imageId: docker-pullable://registry.example/trainer@{DIGEST}
  memoryLimit: 64Gi
  cpuLimit: "16"
  declaredVolumes: [{{path: /models, volume: models, volumeSource: PersistentVolumeClaim/models}}]
criuDump: {{extMnt: {{/models: /var/lib/kubelet/pods/x/volumes/models}}}}
cudaRestore:
  pids: [42]
  sourceGpus: [{{uuid: GPU-a, productName: L4}}, {{uuid: GPU-b, productName: T4}}]
  sourceDriverVersion: 580.65.06
"""
TARGET_YAML = f"""
cpuArch: amd64
kernelVersion: 6.8.0-1015-aws
memoryLimit: 65536Mi
cpuLimit: 16000m
imageId: containerd://{DIGEST}
paths: [/models]
volumes: [{{path: /models, volumeSource: PersistentVolumeClaim/models}}]
gpus: [{{uuid: GPU-y, productName: T4}}, {{uuid: GPU-x, productName: L4}}]
driverVersion: 580.65.06
"""


def _offline(
    tmp_path: Any, manifest_text: str, target_text: str, *extra: str
) -> tuple[int, str, str]:
    import io

    from lifecycle.machines.restore._offline import main

    m, t = tmp_path / "manifest.yaml", tmp_path / "target.yaml"
    m.write_text(manifest_text)
    t.write_text(target_text)
    out, err = io.StringIO(), io.StringIO()
    code = main([str(m), str(t), *extra], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_offline_check_compatible_prints_checks_and_pairing(tmp_path: Any) -> None:
    code, out, err = _offline(tmp_path, MANIFEST_YAML, TARGET_YAML)
    assert (code, err) == (0, "")
    assert out.startswith("verdict: compatible\n")
    assert "gpu pairing: GPU-a->GPU-x (L4), GPU-b->GPU-y (T4)" in out
    for check in ("C5", "C7", "C7m", "C9", "C10", "C12", "C11", "C1", "C2", "C3", "C3m"):
        assert f"  {check} " in out


def test_offline_check_exit_codes(tmp_path: Any) -> None:
    code, out, _ = _offline(tmp_path, MANIFEST_YAML, TARGET_YAML.replace("amd64", "arm64"))
    assert code == 1
    assert out.startswith("verdict: incompatible code=CpuArchMismatch")
    newer = MANIFEST_YAML.replace("schemaVersion: 1", "schemaVersion: 9")
    assert _offline(tmp_path, newer, TARGET_YAML)[0] == 3
    assert _offline(tmp_path, newer, TARGET_YAML, "--on-unknown", "warn")[0] == 0
    legacy = (
        "checkpointId: ckpt-1\ncriuDump: {extMnt: {/models: /x}}\n"
        "cudaRestore: {pids: [1], sourceGpuUuids: [a, b]}\n"
    )
    code, out, _ = _offline(tmp_path, legacy, TARGET_YAML)
    assert code == 0
    assert "LegacyManifest" in out


@pytest.mark.parametrize(
    ("manifest_text", "target_text", "problem"),
    [
        ("[1, 2]", TARGET_YAML, "manifest.yaml: the manifest must be a mapping"),
        (
            MANIFEST_YAML.replace("cpuArch: x86_64", "cpuArch: [x]"),
            TARGET_YAML,
            "manifest.yaml: host.cpuArch: expected a string",
        ),
        (MANIFEST_YAML, TARGET_YAML.replace("65536Mi", "64 gigs"), "target.yaml: memoryLimit:"),
        (MANIFEST_YAML, "gpus: [GPU-1]", "target.yaml: gpus[0]: expected a mapping"),
        ("a: [", TARGET_YAML, "manifest.yaml: YAML at line 1"),
    ],
)
def test_offline_check_refuses_bad_input(
    tmp_path: Any, manifest_text: str, target_text: str, problem: str
) -> None:
    code, out, err = _offline(tmp_path, manifest_text, target_text)
    assert code == 2
    assert out == ""
    assert problem in err
    assert err.startswith(str(tmp_path))


def test_offline_check_refuses_a_completeness_marker_that_is_not_a_boolean(tmp_path: Any) -> None:
    """``complete: "false"`` is a string: it must not read as a complete manifest."""
    quoted = MANIFEST_YAML.replace("complete: true", 'complete: "false"')
    assert quoted != MANIFEST_YAML
    code, out, err = _offline(tmp_path, quoted, TARGET_YAML)
    assert (code, out) == (2, "")
    assert "compat.complete: expected a boolean" in err


def test_restore_check_is_a_lifecycle_subcommand(tmp_path: Any) -> None:
    """The operator reaches the offline check as ``lifecycle restore check``."""
    import io

    from lifecycle.cli import main

    m, t = tmp_path / "manifest.yaml", tmp_path / "target.yaml"
    m.write_text(MANIFEST_YAML)
    t.write_text(TARGET_YAML.replace("amd64", "arm64"))
    out = io.StringIO()
    assert main(["restore", "check", str(m), str(t)], out=out) == 1
    assert out.getvalue().startswith("verdict: incompatible code=CpuArchMismatch")
    out = io.StringIO()
    assert main(["restore", "check", str(m), str(t), "--on-unknown", "warn"], out=out) == 1
