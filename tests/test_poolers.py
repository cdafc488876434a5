"""Every registered pooler on tiny BERT and RoBERTa: shapes, masking, gradients, save/load, determinism."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import layerwise
from layerwise.errors import ConfigError
from layerwise.modeling.poolers import MODES, build_pooler, layer_means, masked_mean
from layerwise.registry import POOLERS

SENTENCES = ["a man is playing guitar", "the dog runs in the park", "two young people eat food", "a cat"]
ALL_POOLERS = POOLERS.names()
ATTENTION_POOLERS = [n for n in ALL_POOLERS if POOLERS.get(n).uses_attention]


def test_registry_lists_every_pooler_of_the_issue():
    expected = {"cls_last", "avg_last", "cls_avg_last", "avg_first_last", "avg_top2", "weighted_layers",
                "cls_all_att", "avg_all_att", "layer_att", "layer_att_cls", "layer_att_res"}
    assert expected <= set(ALL_POOLERS)


@pytest.fixture(params=["tiny_bert", "tiny_roberta"])
def model_dir(request):
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_shape_and_padding_invariance(model_dir, name):
    torch.manual_seed(0)
    encoder = layerwise.load(str(model_dir), pooling=name)
    expected_dim = 64 if name == "cls_avg_last" else 32
    alone = encoder.encode(SENTENCES[:1])
    together = encoder.encode(SENTENCES)  # padded next to longer sentences
    assert together.shape == (len(SENTENCES), expected_dim)
    np.testing.assert_allclose(alone[0], together[0], atol=1e-5)
    short = encoder.encode(SENTENCES[3:4])
    np.testing.assert_allclose(short[0], together[3], atol=1e-5)


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_gradients_reach_pooler_and_backbone(tiny_bert, name):
    encoder = layerwise.load(str(tiny_bert), pooling=name).train()
    batch = encoder.tokenize(SENTENCES)
    if name == "layer_att_res":  # zero-initialised residual: the attention gets gradient from the second step on
        encoder(**batch).pow(2).sum().backward()
        assert torch.any(encoder.pooler.residual.weight.grad != 0)
        torch.optim.SGD(encoder.pooler.parameters(), lr=0.1).step()
        encoder.zero_grad()
    encoder(**batch).pow(2).sum().backward()
    for param in encoder.pooler.parameters():
        assert param.grad is not None and torch.any(param.grad != 0), name
    assert encoder.backbone.embeddings.word_embeddings.weight.grad is not None


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_save_load_round_trip_and_determinism(tiny_bert, tmp_path, name):
    torch.manual_seed(1)
    encoder = layerwise.load(str(tiny_bert), pooling=name)
    with torch.no_grad():
        for param in encoder.pooler.parameters():
            param.add_(torch.randn_like(param) * 0.1)  # leave the initial values (zeros, ones) behind
    if encoder.pooler.uses_attention:
        encoder.calibrate_static(SENTENCES)
    first = encoder.encode(SENTENCES)
    np.testing.assert_array_equal(first, encoder.encode(SENTENCES))  # eval mode is deterministic
    encoder.save(tmp_path / "model")
    loaded = layerwise.load(str(tmp_path / "model"))
    assert loaded.pooler.name == name
    np.testing.assert_allclose(loaded.encode(SENTENCES), first, atol=1e-6)
    if encoder.pooler.uses_attention:
        np.testing.assert_allclose(loaded.encode(SENTENCES, mode="static"), encoder.encode(SENTENCES, mode="static"),
                                   atol=1e-6)


@pytest.mark.parametrize("name", ATTENTION_POOLERS)
def test_inference_modes(tiny_bert, name):
    encoder = layerwise.load(str(tiny_bert), pooling=name)
    weights = encoder.calibrate_static(SENTENCES)
    assert weights.shape == (3,) and abs(weights.sum() - 1) < 1e-5
    batch = encoder.tokenize(SENTENCES)
    with torch.no_grad():
        states = encoder.backbone(**batch, output_hidden_states=True).hidden_states
        last = states[-1]
        np.testing.assert_allclose(encoder.encode(SENTENCES, mode="avg_last"),
                                   masked_mean(last, batch["attention_mask"]).numpy(), atol=1e-5)
        np.testing.assert_allclose(encoder.encode(SENTENCES, mode="cls_last"), last[:, 0].numpy(), atol=1e-5)
        vectors = (torch.stack([h[:, 0] for h in states], 1) if name == "cls_all_att"
                   else layer_means(states, batch["attention_mask"]))
        mix = (torch.tensor(weights)[None, :, None] * vectors).sum(1)
        np.testing.assert_allclose(encoder.encode(SENTENCES, mode="static"), mix.numpy(), atol=1e-5)
    for mode in MODES:
        assert encoder.encode(SENTENCES, mode=mode).shape[0] == len(SENTENCES)


def test_static_mode_needs_an_attention_pooler(tiny_bert):
    with pytest.raises(ConfigError, match="static"):
        layerwise.load(str(tiny_bert), pooling="avg_last", mode="static")


def test_layer_att_res_starts_at_the_pretrained_mean_embedding(tiny_bert):
    encoder = layerwise.load(str(tiny_bert), pooling="layer_att_res")
    np.testing.assert_allclose(encoder.encode(SENTENCES), encoder.encode(SENTENCES, mode="avg_last"), atol=1e-6)


def test_layer_attention_matches_the_official_formula():
    """DESIGN.md: K = RReLU(T Wk), V = RReLU(T Wv), q_i = RReLU(cls_i Wq), a_i = softmax(K q_i / L), O = mean_i o_i."""
    torch.manual_seed(0)
    pooler = build_pooler("layer_att_cls", hidden_size=8, num_layers=3).eval()
    states = tuple(torch.randn(2, 5, 8) for _ in range(3))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    att = pooler.attention
    act = lambda x: torch.nn.functional.rrelu(x, training=False)  # noqa: E731
    T = layer_means(states, mask)
    cls = torch.stack([h[:, 0] for h in states], 1)
    K, V, Q = act(T @ att.key.weight.T), act(T @ att.value.weight.T), act(cls @ att.query.weight.T)
    a = torch.softmax(Q @ K.transpose(1, 2) / 3, dim=-1)
    attended = (a @ V).mean(1)
    expected = torch.tanh(torch.cat([states[-1][:, 0], attended], -1) @ pooler.mlp[0].weight.T + pooler.mlp[0].bias)
    torch.testing.assert_close(pooler(states, mask), expected)
    sqrt_pooler = build_pooler("layer_att", hidden_size=8, num_layers=3, scale="sqrt_h")
    assert sqrt_pooler.attention.divisor == pytest.approx(8 ** 0.5)


def test_unknown_pooler_suggests_closest(tiny_bert):
    with pytest.raises(ConfigError, match="did you mean 'layer_att'"):
        layerwise.load(str(tiny_bert), pooling="layer_at")
