"""Gradient all-reduce: bucketed, overlapped with the backward pass, over the slowest link of the placement."""

import dataclasses
import math

import numpy as np
import pytest

from easlurm.errors import ModelError, TraceError
from easlurm.model.equations import HardwareArrays, all_reduce
from easlurm.model.fit.calibrate import calibrate, comm_free
from easlurm.model.fit.dataset import Measurement, placements_of, read_measurements, write_measurements
from easlurm.model.fit.scaling import scaling_rows, speedups
from easlurm.model.hardware import Catalogue, load_catalogue
from easlurm.model.oracle import Oracle, Placements
from easlurm.model.params import OracleParams, params_from_doc
from easlurm.model.zoo import get_workload

CAT = load_catalogue()


def _catalogue(**changes: dict) -> Catalogue:
    """The shipped catalogue with some GPUs' fields replaced (e.g. an A100 whose GPUs talk over PCIe)."""
    specs = {k: CAT.get(k) for k in CAT}
    for key, fields in changes.items():
        specs[key] = dataclasses.replace(specs[key], **fields)
    return Catalogue(specs)


def test_all_reduce_hidden_under_the_backward_costs_only_the_last_bucket():
    """8 A100s on NVLink, ResNet-50 at 256 images per GPU: the buckets before the last all-reduce while the
    backward runs, so the exposed communication is exactly one 25 MB bucket's ring all-reduce."""
    p = OracleParams()
    w = get_workload("resnet50", precision="bf16")
    oracle = Oracle(p)
    pred1 = oracle.predict(w, Placements.of([1], [256], "a100-40gb"))
    res = oracle._run(oracle._features([w]), Placements.of([1, 8], [256, 2048], "a100-40gb"))
    n, bucket, link = 8, p["ddp_bucket_mb"] * 1e6, CAT.get("a100-40gb").link_gbs * 1e9
    last = 2 * (n - 1) * p["l_hop_s"] + 2 * (n - 1) / n * bucket / (link * p["bw_eff_nvlink"])
    assert w.grad_bytes > 2 * bucket  # several buckets, all but one hidden
    assert res.t_comm_s[0] == 0.0
    assert res.t_comm_s[1] == pytest.approx(last, rel=1e-9)
    # same per-GPU work: the 8-GPU step is the 1-GPU step plus the last bucket and the sync term only
    extra = res.step_time_s[1] - pred1.step_time_s[0]
    assert extra == pytest.approx(last + p["t_sync_s"] * math.log2(n), rel=1e-9)


def test_exposed_communication_falls_as_the_per_gpu_batch_grows():
    """Across nodes, larger per-GPU batches give the backward more time to hide the buckets under."""
    w = get_workload("gpt2", precision="bf16", seq_len=512)
    oracle = Oracle()
    per_gpu = np.array([1, 2, 4, 8, 16])
    res = oracle._run(oracle._features([w]), Placements.of(16, 16 * per_gpu, "a100-40gb", n_nodes=16))
    exposed = res.t_comm_s
    assert np.all(np.diff(exposed) <= 1e-15)
    assert exposed[0] > 2 * exposed[-1]


@pytest.mark.parametrize("gpu", ["a100-40gb", "v100", "a10", "h100-sxm"])
def test_spreading_the_same_gpus_over_more_nodes_never_makes_a_step_faster(gpu):
    spec = CAT.get(gpu)
    oracle = Oracle()
    for model in ("resnet50", "bert-large"):
        w = get_workload(model, precision="bf16")
        for n in (2, 4, 8, 16):
            nodes = [m for m in range(-(-n // spec.gpus_per_node), n + 1)]
            pred = oracle.predict(w, Placements.of(n, 32 * n, gpu, n_nodes=nodes))
            assert np.all(np.diff(pred.step_time_s) >= 0), (model, n, pred.step_time_s)
    k = spec.gpus_per_node
    big = oracle.predict(
        get_workload("bert-large", precision="bf16"), Placements.of(k, 8 * k, gpu, n_nodes=[1, k])
    )
    assert big.step_time_s[1] > big.step_time_s[0]  # and the network really costs


def test_pcie_is_slower_than_nvlink():
    """The same A100 with the same catalogue bandwidth, linked by PCIe instead of NVLink."""
    w = get_workload("bert-large", precision="bf16")
    pl = Placements.of(8, 64, "a100-40gb")
    nvlink = Oracle(catalogue=_catalogue()).predict(w, pl)
    pcie = Oracle(catalogue=_catalogue(**{"a100-40gb": {"link_kind": "pcie"}})).predict(w, pl)
    assert pcie.step_time_s[0] > nvlink.step_time_s[0]


def test_a_shared_network_adapter_is_the_ring_bandwidth_between_nodes():
    """Nodes of four GPUs on 50 Gb/s Ethernet (net_gbs 1.5625 per GPU). One shared adapter gives a ring the
    node's whole bandwidth however few of its GPUs the job uses: 4 GPUs on 2 or on 4 nodes all-reduce alike.
    One adapter per GPU gives a ring only the adapters of the job's GPUs on a node: half the node at 2 per
    node, a quarter at 1. (Hops cost the same inside and between nodes here, so that only bandwidth differs:
    the ring's network steps grow with the node count, `test_only_the_rings_network_steps_pay_its_latency`.)"""
    w = get_workload("bert-large", precision="bf16")
    eth = {"net_gbs": 1.5625, "net_kind": "ethernet"}
    p = OracleParams()
    p = p.replace(["l_hop_net_s"], [p["l_hop_s"]])
    shared = Oracle(p, catalogue=_catalogue(a10={**eth, "nics_per_node": 1}))
    own = Oracle(p, catalogue=_catalogue(a10={**eth, "nics_per_node": 4}))
    pl = Placements.of(4, 4, "a10", n_nodes=[2, 4])
    a = shared._run(shared._features([w]), pl).t_comm_s
    b = own._run(own._features([w]), pl).t_comm_s
    assert a[0] == pytest.approx(a[1], rel=1e-9)
    assert b[0] == pytest.approx(2 * a[0], rel=0.02)
    assert b[1] == pytest.approx(4 * a[0], rel=0.02)


def test_only_the_rings_network_steps_pay_its_latency():
    """NCCL's ring model (src/graph/tuning.cc): of an all-reduce's 2(n-1) steps on m nodes, 2(m-1) cross the
    network and the rest stay on the node's links; a reduce-scatter or all-gather is one pass, n-1 steps of
    which m-1 cross. 128 H100 on 16 nodes: a bucket of one byte costs the latency alone."""
    p = OracleParams()
    hw = HardwareArrays.table([CAT.get("h100-sxm")])
    n, m = np.array([128.0, 128.0, 8.0]), np.array([16.0, 128.0, 1.0])
    one = np.ones(3)
    l_in, l_net = p["l_hop_s"], max(p["l_hop_net_s"], p["l_hop_s"])
    for passes in (2.0, 1.0):
        _, last = all_reduce(one, hw, n, m, p, passes=passes)
        want = passes * ((n - m) * l_in + (m - 1) * l_net)
        assert last == pytest.approx(want, rel=1e-3)
    # spread one GPU per node, every step crosses the network; packed on one node, none does
    _, last = all_reduce(one, hw, n, m, p)
    assert last[1] == pytest.approx(2 * 127 * l_net, rel=1e-3)
    assert last[2] == pytest.approx(2 * 7 * l_in, rel=1e-3)
    assert last[0] < last[1]


def test_placements_validate_their_node_count():
    with pytest.raises(ModelError, match=r"n_nodes 3 outside 1\.\.n_gpus"):
        Placements.of(2, 64, "a100-40gb", n_nodes=3)
    with pytest.raises(ModelError, match="16 GPUs on 1 node"):
        Oracle().predict(get_workload("resnet50"), Placements.of(16, 256, "a100-40gb", n_nodes=1))
    grid = Placements.grid([1, 4], [64], "a10", n_nodes=[1, 2, 4])
    assert list(zip(grid.n_gpus, grid.n_nodes)) == [(1, 1), (4, 1), (4, 2), (4, 4)]
    # 0 = the fewest nodes: 16 GPUs of 8 per node are 2 nodes
    a, b = (
        Oracle()
        .predict(get_workload("bert-large"), Placements.of(16, 256, "a100-40gb", n_nodes=[0, 2]))
        .step_time_s
    )
    assert a == b


def test_a_parameter_file_naming_a_retired_parameter_still_loads():
    doc = {"schema_version": 1, "params": {"bw_eff_frac": 0.5, "bw_eff_pcie": 0.3}}
    assert params_from_doc(doc, "x.yaml")["bw_eff_pcie"] == 0.3
    # u_simt (a share of the TDP range) became e_simt_pj (energy per FLOP): its value and factors are ignored
    doc = {
        "schema_version": 1,
        "params": {"u_simt": 0.9},
        "scalars": {"turing.u_simt": 1.1, "turing.c_p": 1.2},
    }
    loaded = params_from_doc(doc, "x.yaml")
    assert loaded.scalars == {"turing.c_p": 1.2} and "u_simt" not in loaded.values


def test_measurements_carry_their_node_count(tmp_path):
    rows = [
        Measurement("resnet50", 256, "bf16", 4, "a10", 0.5, n_nodes=2, image_size=224),
        Measurement("resnet50", 256, "bf16", 4, "a10", 0.4, image_size=224),
    ]
    path = tmp_path / "m.csv"
    write_measurements(rows, path)
    back = read_measurements(path)
    assert [m.n_nodes for m in back] == [2, None]
    assert list(placements_of(back).n_nodes) == [2, 0]
    write_measurements([dataclasses.replace(rows[0], n_nodes=5)], path)
    with pytest.raises(TraceError, match=r"m.csv:2: n_nodes must be <= n_gpus \(4\), got 5"):
        read_measurements(path)


def _comm_rows(truth: OracleParams, catalogue: Catalogue) -> list[Measurement]:
    """Multi-GPU rows an oracle with known link factors measured: NVLink and PCIe inside a node, InfiniBand
    and Ethernet across nodes, at small per-GPU batches where the all-reduce is exposed."""
    rows = []
    for gpu, per_node in (("a100-40gb", 8), ("a10", 4)):
        for model, size in (("vgg16", {"image_size": 224}), ("gpt2", {"seq_len": 256})):
            for n, nodes in ((per_node, 1), (per_node // 2, 1), (2 * per_node, 2), (4, 4)):
                for b in (1, 4):
                    rows.append(Measurement(model, b * n, "bf16", n, gpu, 1.0, n_nodes=nodes, **size))
    pred = Oracle(truth, catalogue).predict_rows([m.workload() for m in rows], placements_of(rows))
    return [dataclasses.replace(m, step_time_s=float(t)) for m, t in zip(rows, pred.step_time_s)]


def test_calibration_recovers_known_link_factors():
    """One bucket (no overlap) keeps every link's all-reduce in the step times, even NVLink's."""
    catalogue = _catalogue(a10={"net_kind": "ethernet", "nics_per_node": 1})
    base = OracleParams({"ddp_bucket_mb": 1000.0})
    truth = base.replace(["bw_eff_nvlink", "bw_eff_pcie", "bw_eff_ib", "bw_eff_eth"], [0.45, 0.6, 0.5, 0.2])
    rows = _comm_rows(truth, catalogue)
    free = comm_free(rows, catalogue)
    assert set(free) == {"bw_eff_nvlink", "bw_eff_pcie", "bw_eff_ib", "bw_eff_eth", "l_hop_net_s"}
    # enough generations that the search converges whatever the BLAS build (60 stopped short on some)
    res = calibrate(rows, base, free=free, maxiter=150, seed=0, catalogue=catalogue)
    for name in ("bw_eff_nvlink", "bw_eff_pcie", "bw_eff_ib", "bw_eff_eth"):
        assert res.params[name] == pytest.approx(truth[name], rel=0.03), name


def test_scaling_rows_fit_the_measured_speedup_whatever_the_one_gpu_error():
    """Rows 'measured' by an oracle whose compute differs (HBM 70 % slower) and whose sync costs 9 ms per
    doubling: fitting the communication terms to the slowdowns over one GPU brings the 1 -> n speedups to
    the measured ones, though the one-GPU times stay off (how much communication the backward hides
    depends on the compute time, so the error does not cancel exactly)."""
    truth = OracleParams({"c_mem": 2.4, "t_sync_s": 0.009})
    rows = []
    for model, size in (("resnet50", {"image_size": 224}), ("bert-base", {"seq_len": 128})):
        for n in (1, 2, 4, 8):
            rows.append(Measurement(model, 64 * n, "bf16", n, "a100-40gb", 1.0, **size))
    pred = Oracle(truth).predict_rows([m.workload() for m in rows], placements_of(rows))
    rows = [dataclasses.replace(m, step_time_s=float(t)) for m, t in zip(rows, pred.step_time_s)]
    base = OracleParams()
    before = [abs(sp / sm - 1) for _, sm, sp in speedups(rows, base)]
    scaled = scaling_rows(rows, base)
    assert len(scaled) == 6 and all(m.n_gpus > 1 for m in scaled)
    res = calibrate(scaled, base, free=["t_sync_s"], maxiter=30, seed=0)
    after = [abs(sp / sm - 1) for _, sm, sp in speedups(rows, res.params)]
    assert max(before) > 0.10
    assert max(after) < 0.04


def test_scaling_rows_leave_out_rows_out_of_memory_in_the_model():
    """A multi-GPU row whose one-GPU step (or its own) does not fit in the model's memory has no slowdown
    to fit: it is left out, not handed to the calibration as an infinite step (which refused the whole fit)."""
    rows = [
        Measurement(model, b * n, "bf16", n, gpu, 1.0, seq_len=512)
        for model, gpu, b in (("bert-base", "a100-40gb", 8), ("bert-large", "rtx3080", 512))
        for n in (1, 2)
    ]
    pred = Oracle(OracleParams()).predict_rows([m.workload() for m in rows], placements_of(rows))
    assert list(np.isfinite(pred.step_time_s)) == [True, True, False, False]
    scaled = scaling_rows(rows, OracleParams())
    assert [(m.model, m.n_gpus) for m in scaled] == [("bert-base", 2)]
    with pytest.raises(ModelError, match="out of memory in the model"):
        scaling_rows(rows[2:], OracleParams())
