"""Attention-dropout strategies: identity in eval, attach/detach round trip, mask statistics, G-Net gradients."""
from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from tiny import make_tiny_model_dir
from layerwise.errors import ConfigError, DataError
from layerwise.registry import DROPOUT_STRATEGIES
from layerwise.regularization import DropoutOptions, build_strategy
from layerwise.regularization.attendout import AttendOut, load_gnet, save_gnet
from layerwise.atomic import write_json
from layerwise.regularization.pattern import read_pattern_rates

ARCHS = ("bert", "roberta", "electra")
STRATEGIES = ("none", "standard", "attendout", "layerdrop", "attn_layerdrop", "scheduled_bernoulli")
VOCAB = 60


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict:
    # vocab_size given explicitly: the ids below are drawn at random, no tokenizer needed
    return {a: make_tiny_model_dir(tmp_path_factory.mktemp(a), a, vocab_size=VOCAB) for a in ARCHS}


def load(path, **kwargs):
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_pretrained(path, num_labels=2, **kwargs)


def batch(seed: int = 0, size: int = 4, length: int = 9) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (size, length), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # padding in one row
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 1, 1, 0][:size])}


def options(**kwargs) -> DropoutOptions:
    return DropoutOptions(**{"rates": [0.2, 0.5], **kwargs})


def test_registry_has_every_strategy():
    assert set(STRATEGIES) <= set(DROPOUT_STRATEGIES.names())


def test_unknown_strategy_suggests_the_closest():
    with pytest.raises(ConfigError, match="did you mean 'attendout'"):
        build_strategy("atendout", DropoutOptions(), load_config())


def load_config():
    from transformers import BertConfig

    return BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", STRATEGIES)
def test_eval_mode_is_exactly_the_identity(model_dirs, arch, name):
    model = load(model_dirs[arch]).eval()
    inputs = batch()
    with torch.no_grad():
        before = model(**inputs).logits
        strategy = build_strategy(name, options(rate=0.5), model.config).attach(model)
        after = model(**inputs).logits
    assert torch.equal(before, after)
    assert strategy.drop_rates() == {}  # nothing sampled, nothing generated in eval mode
    strategy.detach()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", STRATEGIES)
def test_attach_detach_round_trip(model_dirs, arch, name):
    model = load(model_dirs[arch])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    impl = model.config._attn_implementation
    inputs = batch()
    torch.manual_seed(1)
    train_before = model.train()(**inputs).logits
    strategy = build_strategy(name, options(rate=0.5), model.config).attach(model)
    torch.manual_seed(1)
    loss = model(**inputs).loss  # training mode with the strategy: runs and backpropagates
    extra = strategy.extra_loss()
    (loss + (extra if extra is not None else 0)).backward()
    model.zero_grad(set_to_none=True)
    strategy.detach()
    assert model.config._attn_implementation == impl
    assert all(not m._forward_pre_hooks and not m._forward_hooks and "forward" not in vars(m)
               for m in model.modules())
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    torch.manual_seed(1)
    assert torch.equal(model(**inputs).logits, train_before)
    model.eval()
    fresh = load(model_dirs[arch]).eval()
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, fresh(**inputs).logits)


def test_attach_twice_is_refused(model_dirs):
    model = load(model_dirs["bert"])
    strategy = build_strategy("standard", DropoutOptions(), model.config).attach(model)
    with pytest.raises(ConfigError, match="already attached"):
        strategy.attach(model)
    strategy.detach()
    strategy.detach()  # a second detach is harmless


def within(observed: float, rate: float, n: int, sigmas: float = 4.0) -> bool:
    return abs(observed - rate) <= sigmas * math.sqrt(rate * (1 - rate) / n) + 1e-9


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_standard_mask_statistics_and_rescaling(rate):
    strategy = build_strategy("standard", DropoutOptions(rate=rate), load_config())
    torch.manual_seed(0)
    probs = torch.full((8, 4, 16, 16), 0.25)
    out = strategy.transform_probs(0, probs)
    dropped = (out == 0).float().mean().item()
    assert within(dropped, rate, probs.numel())
    assert torch.allclose(out[out > 0], torch.tensor(0.25 / (1 - rate)))
    assert abs(out.mean().item() - 0.25) < 0.01  # unbiased in expectation
    logs = strategy.drop_rates()
    assert within(logs["drop/layer0"], rate, probs.numel())
    assert set(logs) == {"drop/layer0"} | {f"drop/layer0/head{h}" for h in range(4)}


def run_training_forwards(model, strategy, n: int) -> dict:
    model.train()
    torch.manual_seed(0)
    with torch.no_grad():
        for i in range(n):
            model(**batch(i))
    return strategy.drop_rates()


def test_scheduled_bernoulli_rates_per_layer_through_the_model(model_dirs):
    model = load(model_dirs["bert"])
    strategy = build_strategy("scheduled_bernoulli", DropoutOptions(rates=[0.1, 0.6]), model.config).attach(model)
    logs = run_training_forwards(model, strategy, 20)
    strategy.detach()
    entries = 20 * 4 * 4 * 9 * 9  # forwards x batch x heads x positions
    assert within(logs["drop/layer0"], 0.1, entries) and within(logs["drop/layer1"], 0.6, entries)


def test_scheduled_bernoulli_schedule_and_pattern(tmp_path):
    config = load_config()
    strategy = build_strategy("scheduled_bernoulli", DropoutOptions(rates=[0.0, 0.2], final_rates=[0.4]), config)
    strategy.set_horizon(10)
    assert strategy.layer_rate(0) == 0.0 and strategy.layer_rate(1) == pytest.approx(0.2)
    strategy.forwards.fill_(5)
    assert strategy.layer_rate(0) == pytest.approx(0.2) and strategy.layer_rate(1) == pytest.approx(0.3)
    strategy.forwards.fill_(50)
    assert strategy.layer_rate(0) == pytest.approx(0.4)
    write_json(tmp_path / "pattern.json", {"rates": [0.3, 0.7]})
    learned = build_strategy("scheduled_bernoulli", DropoutOptions(pattern=str(tmp_path / "pattern.json")), config)
    assert [learned.layer_rate(i) for i in range(2)] == [0.3, 0.7]
    with pytest.raises(ConfigError, match="expected 1 or 2 rates"):
        build_strategy("scheduled_bernoulli", DropoutOptions(rates=[0.1, 0.2, 0.3]), config)


def test_pattern_file_errors(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_pattern_rates(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(DataError, match="not valid JSON"):
        read_pattern_rates(tmp_path / "bad.json")
    write_json(tmp_path / "p.json", {"rates": [0.1, 1.5]})
    with pytest.raises(DataError, match=r"\[0, 1\)"):
        read_pattern_rates(tmp_path / "p.json")
    write_json(tmp_path / "drop_pattern.json", {"last": [0.2, 0.4], "overall": [0.1, 0.3]})
    assert read_pattern_rates(tmp_path, "overall") == [0.1, 0.3]


@pytest.mark.parametrize("name", ["layerdrop", "attn_layerdrop"])
def test_layer_skip_rate(model_dirs, name):
    model = load(model_dirs["bert"])
    strategy = build_strategy(name, DropoutOptions(rate=0.3), model.config).attach(model)
    logs = run_training_forwards(model, strategy, 300)
    strategy.detach()
    assert set(logs) == {"drop/layer0", "drop/layer1"}
    assert all(within(v, 0.3, 300) for v in logs.values()), logs


def test_layerdrop_skips_the_layer_and_attn_layerdrop_the_attention(model_dirs):
    model = load(model_dirs["bert"], hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0).train()
    inputs = batch()
    strategy = build_strategy("layerdrop", DropoutOptions(rate=0.9999), model.config).attach(model)
    with torch.no_grad():
        states = model(**inputs, output_hidden_states=True).hidden_states
    strategy.detach()
    assert torch.equal(states[-1], states[0])
    strategy = build_strategy("attn_layerdrop", DropoutOptions(rate=0.9999), model.config).attach(model)
    with torch.no_grad():
        states = model(**inputs, output_hidden_states=True).hidden_states
        expected = model.bert.encoder.layer[0].feed_forward_chunk(states[0])
    strategy.detach()
    assert torch.allclose(states[1], expected, atol=1e-6)


@pytest.mark.parametrize("granularity", ["head", "token"])
@pytest.mark.parametrize("objective", ["adversarial", "cooperative"])
def test_gradients_reach_gnet(model_dirs, granularity, objective):
    model = load(model_dirs["roberta"]).train()
    strategy = build_strategy("attendout", DropoutOptions(granularity=granularity, objective=objective,
                                                          init_rate=0.3), model.config).attach(model)
    torch.manual_seed(0)
    loss = model(**batch()).loss + strategy.extra_loss()
    loss.backward()
    strategy.detach()
    grads = {n: p.grad for n, p in strategy.gnet.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    head = "query.weight" if granularity == "token" else "out.weight"
    assert grads[head].abs().sum() > 0  # the task loss reaches G-Net's output layer through the masks
    assert all(p.grad is not None for n, p in model.named_parameters() if "encoder" in n)


def test_adversarial_reverses_the_task_gradient(model_dirs):
    grads = {}
    for objective in ("adversarial", "cooperative"):
        model = load(model_dirs["bert"]).train()
        strategy = AttendOut(DropoutOptions(objective=objective, init_rate=0.3), model.config).attach(model)
        torch.manual_seed(0)
        strategy.gnet.load_state_dict(AttendOut(DropoutOptions(init_rate=0.3), model.config).gnet.state_dict())
        torch.manual_seed(1)
        model(**batch()).loss.backward()  # task loss only
        strategy.extra_loss()
        strategy.detach()
        grads[objective] = strategy.gnet.out.weight.grad.clone()
    assert grads["cooperative"].abs().sum() > 0
    assert torch.allclose(grads["adversarial"], -grads["cooperative"], atol=1e-6)


def test_attendout_logs_rates_and_budget_penalty(model_dirs):
    model = load(model_dirs["electra"])
    opts = DropoutOptions(init_rate=0.2, target_rate=0.1, budget_weight=2.0)
    strategy = build_strategy("attendout", opts, model.config).attach(model)
    model.train()
    model(**batch())
    penalty = strategy.extra_loss()
    assert penalty.item() == pytest.approx(2.0 * (0.2 - 0.1) ** 2, rel=1e-4)  # untrained G-Net: exactly init_rate
    assert strategy.extra_loss() is None  # consumed
    logs = strategy.drop_rates()
    assert logs["drop/layer0"] == pytest.approx(0.2, rel=1e-4) and "drop/layer1/head3" in logs
    pattern = strategy.pattern()
    assert pattern["last"] == pytest.approx([0.2, 0.2], rel=1e-4) and len(pattern["overall_heads"][0]) == 4
    strategy.detach()
    assert strategy.parameter_groups()[0]["lr"] == opts.gnet_lr


def test_gnet_save_and_load(tmp_path):
    strategy = AttendOut(DropoutOptions(granularity="token"), load_config())
    save_gnet(strategy.gnet, tmp_path / "gnet")
    loaded = load_gnet(tmp_path / "gnet")
    assert all(torch.equal(a, b) for a, b in zip(strategy.gnet.state_dict().values(), loaded.state_dict().values()))
    with pytest.raises(DataError):
        load_gnet(tmp_path)
