"""nirbridge.engine.rows: a stateless layer runs over all T·B rows only where that equals stepping."""

from __future__ import annotations

import torch

import nirbridge
from nirbridge.engine import rows


class Centred(torch.nn.Module):
    """Not row by row: each row minus the mean of its batch, so T·B rows at once differ."""

    def forward(self, x):
        return x - x.mean(dim=0, keepdim=True)


class Counted(torch.nn.Linear):
    calls = 0

    def forward(self, x):
        Counted.calls += 1
        return super().forward(x)


def stepped(module, x):
    with torch.no_grad():
        return torch.stack([module(x_t) for x_t in x])


def test_a_layer_runs_bit_for_bit_like_stepping_whatever_the_matrix_library_does():
    torch.manual_seed(0)
    for n_in, n_out in [(256, 128), (2048, 100), (12, 64)]:
        layer = torch.nn.Linear(n_in, n_out)
        x = (torch.rand(40, 8, n_in) < 0.3).float()
        with torch.no_grad(), nirbridge.precision("exact"):
            got = rows.time_batched(layer, x)
        assert torch.equal(got, stepped(layer, x)), (n_in, n_out)


def test_a_plain_linear_at_batch_one_runs_as_one_batched_product_where_that_is_exact():
    torch.manual_seed(1)
    layer = torch.nn.Linear(128, 128)
    x = (torch.rand(50, 1, 128) < 0.3).float()
    with torch.no_grad(), nirbridge.precision("exact"):
        chosen = rows.way(layer, x)
        assert torch.equal(rows.time_batched(layer, x), stepped(layer, x)), chosen
        layer.register_forward_pre_hook(lambda module, args: None)  # a hook: every call goes through it
        assert rows.way(layer, x) == chosen
        assert torch.equal(rows.time_batched(layer, x), stepped(layer, x))
    assert chosen in ("flat", "batched", "steps")


def test_a_layer_that_mixes_rows_is_stepped():
    x = torch.randn(6, 4, 3)
    with nirbridge.precision("exact"):
        assert not rows.rows_independent(Centred(), x)
        assert torch.equal(rows.time_batched(Centred(), x), stepped(Centred(), x))
    with nirbridge.precision("fast"):  # one call: the mean over all 24 rows
        assert torch.allclose(rows.time_batched(Centred(), x), x - x.reshape(24, 3).mean(0))


def test_the_way_is_probed_once_per_shape_and_fast_makes_one_call():
    layer = Counted(5, 3)
    x = torch.randn(10, 2, 5)
    with torch.no_grad(), nirbridge.precision("exact"):
        rows.time_batched(layer, x)
        first = Counted.calls
        rows.time_batched(layer, x)
        again = Counted.calls - first
    assert again in (1, 10)  # one call, or one per step: no second probe
    assert rows.way(layer, x) in ("flat", "steps")  # a subclass with its own forward is never batched
    Counted.calls = 0
    with torch.no_grad(), nirbridge.precision("fast"):
        rows.time_batched(layer, x)
    assert Counted.calls == 1


def test_a_run_equals_stepping_through_a_wide_layer():
    graph = nirbridge.torch_to_nir(
        torch.nn.Sequential(
            torch.nn.Linear(256, 128), nirbridge.neurons.LIF(tau=1e-3, r=10.0, v_threshold=0.5)
        ),
        example_input=torch.zeros(1, 256),
    )
    gm = nirbridge.nir_to_torch(graph, dt=1e-4)
    x = (torch.rand(30, 8, 256) < 0.3).float()
    with torch.no_grad():
        result = nirbridge.run(gm, x, record="all")
        state, outs, layer = None, [], []
        for x_t in x:
            out, state = gm(x_t, state)
            outs.append(out)
        layer = stepped(gm.get_submodule("0"), x)
    assert torch.equal(result.output, torch.stack(outs))
    assert torch.equal(result.records["0"], layer)


class SpikesOnly(torch.nn.Module):
    """A user's layer that refuses anything but 0/1 inputs (as the probe's random rows are not)."""

    def forward(self, x):
        if not bool(((x == 0) | (x == 1)).all()):
            raise ValueError("spikes only")
        return 2 * x


def test_a_layer_that_refuses_the_probes_rows_is_stepped_not_failed():
    x = (torch.rand(7, 3, 4) < 0.5).float()
    with nirbridge.precision("exact"):
        assert rows.way(SpikesOnly(), x) == "steps"
        assert torch.equal(rows.time_batched(SpikesOnly(), x), 2 * x)


def test_small_chunks_of_small_layers_equal_stepping_whatever_the_weights():
    """One draw of 6 rows probed a 2 -> 2 float64 Affine as "flat"; other weights of the
    same shape then differed from stepping in the last bit (a run of a random graph
    failed in 1 of about 40). Every layer of that shape, and every input, equals stepping."""
    torch.manual_seed(3)
    x = torch.empty(3, 2, 2, dtype=torch.float64)
    for _ in range(300):
        layer = torch.nn.Linear(2, 2, dtype=torch.float64)
        with torch.no_grad():
            layer.weight.normal_(0, 2)
            layer.bias.normal_(0, 1)
        x.uniform_(-1, 3)
        with torch.no_grad(), nirbridge.precision("exact"):
            got = rows.time_batched(layer, x)
        assert torch.equal(got, stepped(layer, x)), rows.way(layer, x)


def test_a_layer_that_agrees_by_its_weights_decides_nothing_for_another():
    """An identity 256 -> 256 layer sums the same whatever the order; probed first, it
    used to decide "flat" for a dense layer of its shape, which then differed from
    stepping. The probe runs on random weights, so the verdict holds for both."""
    identity = torch.nn.Linear(256, 256)
    with torch.no_grad():
        identity.weight.copy_(torch.eye(256))
        identity.bias.zero_()
    dense = torch.nn.Linear(256, 256)
    x = torch.randn(40, 8, 256, generator=torch.Generator().manual_seed(4))
    rows._WAYS.clear()
    with torch.no_grad(), nirbridge.precision("exact"):
        assert torch.equal(rows.time_batched(identity, x), stepped(identity, x))
        assert torch.equal(rows.time_batched(dense, x), stepped(dense, x))


def test_a_short_sum_of_like_terms_is_probed_with_like_weights():
    """A 3 -> 1 float32 layer in chunks of 2 and 4 (batch 5) passed the probe with
    weights and values spread over 13 octaves (one term dominates a 3-term sum, so
    every order rounds alike) and then differed from stepping in more than half of its
    rows on plain weights and inputs. Probed with weights of one scale too, it equals
    stepping on every draw."""
    generator = torch.Generator().manual_seed(9)
    layer = torch.nn.Linear(3, 1)
    for steps in (2, 3, 4, 8):
        rows._WAYS.clear()
        for _ in range(100):
            x = torch.randn(steps, 5, 3, generator=generator)
            with torch.no_grad(), nirbridge.precision("exact"):
                got = rows.time_batched(layer, x)
            assert torch.equal(got, stepped(layer, x)), (steps, rows.way(layer, x))
