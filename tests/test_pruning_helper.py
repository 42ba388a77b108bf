"""``assert_shrinks``, ``prune`` and ``nni_speedup``: the figures are right on small real models,
a model that did not shrink fails with a message naming each measure, bad arguments and
untraceable models give clear errors, and a user's failing test shows the message, not this
library's internals.
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from typing import TYPE_CHECKING

import pytest
import torch
from torch import nn

from pytest_hpml import (
    Footprint,
    UntraceableModelError,
    assert_shrinks,
    nni_speedup,
    prune,
)

if TYPE_CHECKING:
    from tests.conftest import Project

needs_nni = pytest.mark.skipif(importlib.util.find_spec("nni") is None, reason="needs nni")

INPUTS = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def net(channels: int = 8) -> nn.Sequential:
    """Conv2d(3, channels, 3) → ReLU → Linear(channels·6·6, 10), weights from seed 0."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Conv2d(3, channels, 3), nn.ReLU(), nn.Flatten(), nn.Linear(channels * 36, 10)
        )


def zeroed(model: nn.Sequential, filters: int) -> nn.Sequential:
    """A copy of ``model`` with its first ``filters`` convolution filters set to zero: a pruning
    mask applied, nothing removed."""
    masked = copy.deepcopy(model)
    with torch.no_grad():
        masked[0].weight[:filters] = 0
        masked[0].bias[:filters] = 0
    return masked


class Gated(nn.Module):
    """Flips its features when they sum below zero: control flow on a tensor value."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.fc = nn.Linear(8 * 36, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.conv(images).relu()
        if features.sum() < 0:
            features = -features
        return self.fc(features.flatten(1))


class Flippable(Gated):
    """Control flow on a plain argument: traceable once the argument is fixed."""

    def forward(self, images: torch.Tensor, flip: bool = False) -> torch.Tensor:
        features = self.conv(images).relu()
        if flip:
            features = -features
        return self.fc(features.flatten(1))


def test_footprint_counts_parameters_bytes_and_forward_flops_by_hand() -> None:
    # conv: 3·8·9 + 8 = 224 parameters, 2·(2·8·6·6)·27 = 31,104 FLOPs on 2 images;
    # linear: 288·10 + 10 = 2,890 parameters, 2·2·288·10 = 11,520 FLOPs. float32: 4 bytes each.
    assert Footprint.of(net(8), INPUTS) == Footprint(params=3114, bytes=12456, flops=42624)
    assert Footprint.of(net(8)) == Footprint(params=3114, bytes=12456, flops=None)


def test_footprint_bytes_include_buffers() -> None:
    # 8 float32 parameters, running mean and variance (8 float32), num_batches_tracked (int64).
    assert Footprint.of(nn.BatchNorm2d(4)) == Footprint(params=8, bytes=72)


def test_passes_when_every_measure_shrinks_and_returns_the_figures() -> None:
    shrinkage = assert_shrinks(net(8), net(4), example_inputs=INPUTS, max_ratio=0.55)
    assert shrinkage.dense == Footprint(3114, 12456, 42624)
    assert shrinkage.pruned == Footprint(1562, 6248, 21312)
    assert shrinkage.ratios == {"params": 1562 / 3114, "bytes": 6248 / 12456, "flops": 0.5}


def test_without_inputs_flops_are_not_compared() -> None:
    shrinkage = assert_shrinks(net(8), net(4))
    assert set(shrinkage.ratios) == {"params", "bytes"}
    assert shrinkage.pruned.flops is None


def test_masks_alone_fail_on_every_measure_with_both_figures_and_the_ratio() -> None:
    with pytest.raises(AssertionError) as raised:
        assert_shrinks(net(8), zeroed(net(8), 4), example_inputs=INPUTS)
    assert str(raised.value).splitlines() == [
        "pruned model did not shrink enough in params, bytes, flops",
        "  measure   dense  pruned  pruned/dense  needs",
        "  params    3,114   3,114         1.000  < 1    FAILED",
        "  bytes    12,456  12,456         1.000  < 1    FAILED",
        "  flops    42,624  42,624         1.000  < 1    FAILED",
        "dense: torch.nn.modules.container.Sequential, "
        "pruned: torch.nn.modules.container.Sequential",
        "flops: one forward pass in eval mode on inputs (2, 3, 8, 8) float32",
    ]


def test_only_the_measures_that_miss_their_bound_are_named() -> None:
    with pytest.raises(AssertionError) as raised:
        assert_shrinks(net(8), net(4), example_inputs=INPUTS, max_ratio={"flops": 0.4})
    lines = str(raised.value).splitlines()
    assert lines[0] == "pruned model did not shrink enough in flops"
    assert lines[2].split()[-1] == lines[3].split()[-1] == "ok"  # params, bytes: < 1 holds
    assert lines[4].split()[-3:] == ["<=", "0.4", "FAILED"]


def test_half_precision_halves_the_bytes_not_the_parameters() -> None:
    with pytest.raises(AssertionError, match=r"did not shrink enough in params\n"):
        assert_shrinks(net(8), net(8).half())
    assert_shrinks(net(8), net(8).half(), measures=["bytes"], max_ratio=0.5)


def test_flops_are_counted_in_eval_mode_and_the_model_is_left_as_it_was() -> None:
    dense = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(288, 10))
    before = copy.deepcopy(dense.state_dict())
    pruned = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(144, 10))
    assert_shrinks(dense, pruned, example_inputs=INPUTS)
    assert all(m.training for m in dense.modules())
    for name, value in dense.state_dict().items():
        assert torch.equal(value, before[name]), f"{name} changed"


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, True, "0.5", float("nan")])
def test_a_max_ratio_outside_0_to_1_is_a_value_error(bad: object) -> None:
    with pytest.raises(ValueError, match=r"max_ratio for params must be a number between 0 and 1"):
        assert_shrinks(net(8), net(4), max_ratio=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"max_ratio for flops must be"):
        assert_shrinks(net(8), net(4), example_inputs=INPUTS, max_ratio={"flops": bad})


def test_unknown_or_uncountable_measures_are_value_errors() -> None:
    with pytest.raises(ValueError, match=r"measures must be some of params, bytes, flops"):
        assert_shrinks(net(8), net(4), measures=["latency"])
    with pytest.raises(ValueError, match=r"counting flops needs example_inputs"):
        assert_shrinks(net(8), net(4), measures=["flops"])
    with pytest.raises(ValueError, match=r"max_ratio names flops, not among the measures"):
        assert_shrinks(net(8), net(4), max_ratio={"flops": 0.5})


def test_inputs_the_pruned_model_cannot_take_fail_with_its_own_error() -> None:
    with pytest.raises(RuntimeError, match=r"shapes cannot be multiplied"):
        assert_shrinks(net(8), net(4), example_inputs=torch.zeros(2, 3, 9, 9))


@needs_nni
def test_prune_returns_a_smaller_copy_and_leaves_the_model_alone() -> None:
    dense = net(8)
    before = copy.deepcopy(dense.state_dict())
    pruned = prune(dense, 0.5, INPUTS)
    assert [pruned[0].out_channels, pruned[3].in_features] == [4, 4 * 36]
    assert Footprint.of(pruned, INPUTS) == Footprint.of(net(4), INPUTS)
    assert all(torch.equal(v, before[k]) for k, v in dense.state_dict().items())
    assert pruned(INPUTS).shape == (2, 10)


@needs_nni
def test_prune_without_speed_up_zeroes_the_smallest_l1_filters_and_keeps_the_shape() -> None:
    dense = net(8)
    masked = prune(dense, 0.5, speed_up=False)
    assert Footprint.of(masked, INPUTS) == Footprint.of(dense, INPUTS)
    zero = (masked[0].weight.flatten(1).abs().sum(1) == 0) & (masked[0].bias == 0)
    smallest = dense[0].weight.flatten(1).abs().sum(1).argsort()[:4]
    assert sorted(zero.nonzero().flatten().tolist()) == sorted(smallest.tolist())
    assert torch.equal(masked[0].weight[~zero], dense[0].weight[~zero])


@needs_nni
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_prune_works_in_either_mode_and_keeps_it(training: bool) -> None:
    # NNI runs the model on the example inputs, in training mode if the model is in it, where
    # BatchNorm refuses one value per channel (a batch of one, 1x1 features); and it makes the
    # replacement layers in training mode whatever the model's mode was.
    dense = nn.Sequential(nn.Conv2d(3, 8, 8), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1))
    dense.train(training)
    pruned = prune(dense, 0.5, INPUTS[:1])
    assert pruned[1].num_features == 4
    assert [m.training for m in pruned.modules()] == [training] * 5


@needs_nni
@pytest.mark.parametrize("pruner", ["l1", "l2", "fpgm"])
def test_every_named_pruner_shrinks_the_model(pruner: str) -> None:
    assert_shrinks(net(8), prune(net(8), 0.5, INPUTS, pruner=pruner), max_ratio=0.55)


@needs_nni
def test_speed_up_computes_what_the_masked_model_computes() -> None:
    masked = prune(net(8), 0.5, speed_up=False)
    pruned = prune(net(8), 0.5, INPUTS)
    torch.testing.assert_close(pruned(INPUTS), masked(INPUTS))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sparsity": 0.0}, r"sparsity must be between 0 and 1 \(exclusive\), got 0\.0"),
        ({"sparsity": 1.0}, r"sparsity must be between 0 and 1 \(exclusive\), got 1\.0"),
        ({"sparsity": 0.5, "example_inputs": None}, r"speed_up needs example_inputs"),
        ({"sparsity": 0.5, "pruner": "taylor"}, r"pruner must be one of l1, l2, fpgm"),
        ({"sparsity": 0.5, "op_types": ["Conv3d"]}, r"no module of .* op_types=\['Conv3d'\]"),
    ],
    ids=["zero", "one", "no-inputs", "unknown-pruner", "no-such-layer"],
)
def test_bad_prune_arguments_are_value_errors(kwargs: dict[str, object], message: str) -> None:
    if "op_types" in kwargs or "pruner" in kwargs:
        pytest.importorskip("nni")
    kwargs.setdefault("example_inputs", INPUTS)
    with pytest.raises(ValueError, match=message):
        prune(net(8), **kwargs)  # type: ignore[arg-type]


@needs_nni
def test_an_untraceable_model_gets_one_clear_error_naming_it_and_the_reason() -> None:
    with pytest.raises(UntraceableModelError) as raised:
        prune(Gated(), 0.5, INPUTS)
    message = str(raised.value)
    assert message.startswith(
        "cannot speed up tests.test_pruning_helper.Gated: torch.fx.symbolic_trace cannot trace "
        "it: TraceError: symbolically traced variables cannot be used as inputs to control flow"
    )
    assert "pass graph_module=" in message
    assert isinstance(raised.value.__cause__, torch.fx.proxy.TraceError)


@needs_nni
def test_a_trace_of_your_own_is_used_instead() -> None:
    from nni.compression.pruning import L1NormPruner

    model = Flippable()
    with pytest.raises(UntraceableModelError, match=r"Flippable"):
        prune(model, 0.5, INPUTS)
    pruner = L1NormPruner(model, [{"op_types": ["Conv2d"], "sparse_ratio": 0.5}])
    _, masks = pruner.compress()
    pruner.unwrap_model()
    graph = torch.fx.symbolic_trace(model, concrete_args={"flip": False})
    assert nni_speedup(model, masks, INPUTS, graph_module=graph) is model
    assert model.conv.out_channels == 4
    assert model(INPUTS).shape == (2, 10)


def test_without_nni_pruning_raises_an_import_error_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in sys.modules if n == "nni" or n.startswith("nni.")] + ["nni"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    with pytest.raises(ImportError, match=r"needs NNI .*: pip install nni"):
        prune(net(8), 0.5, INPUTS)
    with pytest.raises(ImportError, match=r"pytest-hpml's 'suites' extra"):
        nni_speedup(net(8), {}, INPUTS)


USER_TEST = """
import copy

import torch
from torch import nn

from pytest_hpml import assert_shrinks


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(288, 10))


def test_my_pruning_shrinks_the_model():
    model = make()
    pruned = copy.deepcopy(model)
    with torch.no_grad():
        pruned[0].weight[:4] = 0  # my pruning pipeline forgot the speed-up
    assert_shrinks(model, pruned, example_inputs=torch.zeros(2, 3, 8, 8), max_ratio=0.6)


def test_a_smaller_model_passes():
    small = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 10))
    figures = assert_shrinks(make(), small, example_inputs=torch.zeros(2, 3, 8, 8))
    assert figures.ratios["flops"] == 0.5
"""


def test_a_failing_user_test_shows_the_message_at_the_users_line(project: Project) -> None:
    project.write_tests(USER_TEST)
    result = project.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            ">       assert_shrinks(model, pruned, example_inputs=torch.zeros(2, 3, 8, 8), *",
            "E       AssertionError: pruned model did not shrink enough in params, bytes, flops",
            "E         measure   dense  pruned  pruned/dense  needs",
            "E         params    3,114   3,114         1.000  <= 0.6  FAILED",
            "E         bytes    12,456  12,456         1.000  <= 0.6  FAILED",
            "E         flops    42,624  42,624         1.000  <= 0.6  FAILED",
            "E       dense: torch.nn.modules.container.Sequential, pruned: *",
            "E       flops: one forward pass in eval mode on inputs (2, 3, 8, 8) float32",
            "test_inner.py:*: AssertionError",
        ]
    )
    assert "pytest_hpml" not in result.stdout.str().replace("from pytest_hpml import", "")
