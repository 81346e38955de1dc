"""The benchmark's pairs (benchmarks/attention_speed.py): each of the course's attention paths
computes what its PyTorch counterpart computes, and keeps no more memory for the backward pass."""

import importlib.util

import pytest
import torch

from conventions import ROOT

spec = importlib.util.spec_from_file_location("attention_speed",
                                              ROOT / "benchmarks" / "attention_speed.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

SIZE = (2, 24, 32, 4)  # batch, tokens, embed_dim, heads
PATHS = list(bench.pairs(SIZE[2], SIZE[3], SIZE[1]))


@pytest.fixture(scope="module")
def pairs():
    return bench.pairs(SIZE[2], SIZE[3], SIZE[1])


def inputs():
    b, n, d, _ = SIZE
    return torch.randn(b, n, d, generator=torch.Generator().manual_seed(0), requires_grad=True)


@pytest.mark.parametrize("path", PATHS)
def test_each_path_computes_what_its_pytorch_counterpart_computes(pairs, path):
    ours, theirs = pairs[path]
    x = inputs()
    out, expected = ours(x), theirs(x)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    grad, = torch.autograd.grad(out.square().sum(), x)
    expected_grad, = torch.autograd.grad(expected.square().sum(), x)
    torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("path", [p for p in PATHS if not p.startswith("learner")])
def test_the_course_saves_no_more_for_backward_than_pytorch(pairs, path):
    ours, theirs = pairs[path]
    assert bench.saved_bytes(ours, inputs()) <= bench.saved_bytes(theirs, inputs())


def test_saved_bytes_sees_the_weights_the_explicit_path_keeps(pairs):
    # the instrument itself: the explicit path keeps the (B, h, n, n) weights, the fused does not
    b, n, _, h = SIZE
    shapes = {"weights": [], "fused": []}
    for path, seen in shapes.items():
        with torch.autograd.graph.saved_tensors_hooks(lambda t, s=seen: s.append(t.shape) or t,
                                                      lambda t: t):
            pairs[path][0](inputs())
    assert (b, h, n, n) in shapes["weights"] and (b, h, n, n) not in shapes["fused"]
    assert bench.saved_bytes(pairs["weights"][0], inputs()) > bench.saved_bytes(
        pairs["fused"][0], inputs())


def test_recorded_runs_back_chapter_4s_reading():
    """Chapter 4 reads the shipped benchmark runs and says: no median of the course's own paths
    but one is more than 5 % slower than PyTorch's (here: at least 95 % of them, none above 1.1),
    many are more than 5 % faster, and none saves more for backward; the loop of heads is mostly
    slower than PyTorch at the two small sizes (in more than half of the runs at n = 64 and 128)
    and faster at n = 1024, the one-softmax layer slowest at n = 1024; the weights path costs
    about twice the fused one forward at n = 1024 and about 1.5 times forward and backward. The
    runs cover what the chapter says (2 runs, 3 sizes, 1 and 2 threads)."""
    import csv
    from importlib import resources

    with resources.files("mha").joinpath("data/attention_speed.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len({r["run"] for r in rows}) >= 2
    assert {r["threads"] for r in rows} == {"1", "2"}
    assert {(r["batch"], r["tokens"], r["embed_dim"], r["heads"]) for r in rows} == {
        tuple(str(v) for v in size) for size in bench.SIZES}
    ours = [r for r in rows if not r["path"].startswith("learner")]
    assert {r["path"] for r in ours} == {p for p in PATHS if not p.startswith("learner")}
    ratios = [float(r["ratio"]) for r in ours]
    assert sum(x <= 1.05 for x in ratios) >= 0.95 * len(ratios) and max(ratios) < 1.1
    assert max(float(r["saved_ratio"]) for r in ours if r["saved_ratio"]) <= 1.0
    assert sum(x < 0.95 for x in ratios) >= 0.25 * len(ratios)

    def ratios_of(path, tokens):
        return [float(r["ratio"]) for r in rows if r["path"] == path and r["tokens"] == tokens]

    loop = {t: ratios_of("learner: loop of heads", t) for t in ("64", "128", "1024")}
    small = loop["64"] + loop["128"]
    assert max(loop["1024"]) < 1 and sum(x > 1 for x in small) > len(small) / 2  # mostly slower
    softmax = {t: ratios_of("learner: one softmax", t) for t in ("64", "128", "1024")}
    assert min(softmax["1024"]) > max(softmax["64"] + softmax["128"])

    def ms(path, pass_):
        return {(r["run"], r["threads"]): float(r["ours_ms"]) for r in rows
                if r["path"] == path and r["pass"] == pass_ and r["tokens"] == "1024"}

    for pass_, low, high in (("forward", 1.7, 2.3), ("forward+backward", 1.3, 1.7)):
        fused = ms("fused", pass_)
        slower = [t / fused[key] for key, t in ms("weights", pass_).items()]
        assert low < min(slower) and max(slower) < high, (pass_, slower)
