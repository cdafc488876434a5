"""A sentence-transformers module that runs any layerwise pooler: `layerwise.st.LayerAttentionPooling`.

It sits after sentence-transformers' Transformer module (loaded with `output_hidden_states=True`, so the features
carry `all_layer_embeddings`, the embedding output first) and writes `sentence_embedding`. It saves its own
config (config.json: pooler name, constructor kwargs, inference mode) and weights (model.safetensors) the
sentence-transformers 6.x way, so it round-trips through modules.json. sentence-transformers 6 imports module
classes outside its own namespace only when asked: load with `SentenceTransformer(path, trust_remote_code=True)`
or `SentenceTransformer(path, module_classes={"layerwise.st.LayerAttentionPooling": LayerAttentionPooling})`.

Only the attention poolers in `full` mode need it: `layerwise export` writes every other pooler/mode with
sentence-transformers' own modules (see layerwise.export).
"""
from __future__ import annotations

from typing import Any

from sentence_transformers.sentence_transformer.modules import Module

from layerwise.modeling.poolers import build_pooler, check_mode


class LayerAttentionPooling(Module):
    """Any registered layerwise pooler (by name + kwargs) in a given inference mode, as a sentence-transformers
    module."""

    config_keys: list[str] = ["pooler_name", "pooler_kwargs", "mode"]

    def __init__(self, pooler_name: str, pooler_kwargs: dict[str, Any], mode: str = "full") -> None:
        super().__init__()
        self.pooler_name, self.pooler_kwargs = pooler_name, dict(pooler_kwargs)
        self.pooler = build_pooler(pooler_name, **self.pooler_kwargs)
        self.mode = check_mode(self.pooler, mode)

    @classmethod
    def from_pooler(cls, pooler, mode: str = "full") -> "LayerAttentionPooling":
        """Wrap (a copy of the weights of) an existing layerwise pooler."""
        module = cls(pooler.name, pooler.config(), mode)
        module.pooler.load_state_dict(pooler.state_dict())
        return module

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        hidden_states = features.get("all_layer_embeddings")
        if hidden_states is None:
            if self.mode in ("cls_last", "avg_last") or not self.pooler.needs_all_layers:
                hidden_states = (features["token_embeddings"],)
            else:
                raise ValueError(
                    "LayerAttentionPooling needs all hidden states: load the Transformer module with "
                    "config_kwargs={'output_hidden_states': True}"
                )
        features["sentence_embedding"] = self.pooler(tuple(hidden_states), features["attention_mask"], self.mode)
        return features

    def get_embedding_dimension(self) -> int:
        return self.pooler.output_dim if self.mode == "full" else self.pooler.hidden_size

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             **kwargs) -> "LayerAttentionPooling":
        hub_kwargs = {"subfolder": subfolder, "token": token, "cache_folder": cache_folder, "revision": revision,
                      "local_files_only": local_files_only}
        module = cls(**cls.load_config(model_name_or_path, **hub_kwargs))
        if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
            module = cls.load_torch_weights(model_name_or_path, model=module, **hub_kwargs)
        return module

    def __repr__(self) -> str:
        return (f"LayerAttentionPooling(pooler={self.pooler_name!r}, mode={self.mode!r}, "
                f"dim={self.get_embedding_dimension()})")


__all__ = ["LayerAttentionPooling"]
