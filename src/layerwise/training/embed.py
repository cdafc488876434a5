"""Contrastive sentence-embedding training: configuration, data, objectives and the run itself."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
import torch

from layerwise.config import TrainingConfig, default_data_dir, non_negative, positive, save_config
from layerwise.data.batching import TokenStore, count_batches, epoch_batches
from layerwise.data.readers import Triplet, read_lines, read_nli_csv, read_snli_triplets, read_triplet_table
from layerwise.errors import ConfigError, DataError
from layerwise.losses import info_nce_offset
from layerwise.training import distributed
from layerwise.training.distributed import gather_rows
from layerwise.registry import OBJECTIVES, POOLERS


def _embed_training_defaults() -> TrainingConfig:
    return TrainingConfig(lr=2e-5, batch_size=64, epochs=1.0, eval_every=25, warmup_ratio=0.1)


@dataclass
class EmbedConfig:
    """Options of `layerwise train-embed`."""

    model: str = "all-MiniLM-L6-v2"  # model directory, Hub name, or the default model's short name
    pooler: str = "layer_att_res"  # see README: cls_last, avg_last, ..., layer_att_cls, layer_att_res
    pooler_scale: Literal["layers", "sqrt_h"] = "layers"  # attention scores divided by L (official) or sqrt(H)
    pooler_lr: float = 1e-3  # learning rate of the pooler's own parameters
    objective: str = "supervised"  # supervised | unsupervised | hybrid
    temperature: float = 0.05  # InfoNCE temperature
    hard_negative_weight: float = 0.0  # logit bonus for each anchor's own hard negative (official code: 1.0)
    unsup_weight: float = 1.0  # hybrid: loss = supervised + unsup_weight * unsupervised
    data_dir: str = field(default_factory=default_data_dir)  # holds senteval/SNLI, stsbenchmark, wiki1m_slice
    train_file: str = ""  # supervised: nli_for_simcse.csv / .tsv / .jsonl triplets; default SNLI dev+test
    train_columns: list[str] = field(default_factory=lambda: ["anchor", "positive", "negative"])  # of train_file
    unsup_file: str = ""  # unsupervised/hybrid: one sentence per line; default wiki1m_slice
    dataset: str = ""  # Hugging Face Hub dataset instead of train_file/unsup_file, e.g.
                       # sentence-transformers/all-nli:triplet
    subset: int = 0  # cap on training examples (0: all)
    max_length: int = 64  # tokens per sentence in training (longer texts are truncated, with a warning)
    length_chunks: int = 4  # forward a batch's sentences in this many length-sorted chunks (less padding; 1: off)
    eval_batch_size: int = 128  # sentences per batch when scoring STS-B
    grad_cache_chunk: int = 0  # GradCache: embed in chunks of this many sentences (0: off)
    eval_subset: int = 0  # cap on STS-B pairs scored during and after training (0: all; for quick looks)
    static_sentences: int = 2000  # sentences used to freeze the attention into the static layer mix
    output_dir: str = ""  # run directory (default: runs/train-embed-POOLER-TIMESTAMP)
    train: TrainingConfig = field(default_factory=_embed_training_defaults)

    def validate(self) -> None:
        POOLERS.get(self.pooler)
        OBJECTIVES.get(self.objective)
        positive(self, "pooler_lr", "temperature", "max_length", "eval_batch_size", "length_chunks")
        non_negative(self, "subset", "eval_subset", "static_sentences", "unsup_weight",
                     "grad_cache_chunk")


@dataclass
class EmbedData:
    """Training examples: triplets (supervised) and/or sentences (unsupervised)."""

    triplets: list[Triplet]
    sentences: list[str]

    def texts(self) -> list[str]:
        return [t for trip in self.triplets for t in (trip.anchor, trip.positive, trip.negative)] + self.sentences


def load_embed_data(cfg: EmbedConfig) -> EmbedData:
    """Read the training data the objective needs (and only that)."""
    supervised = cfg.objective in ("supervised", "hybrid")
    unsupervised = cfg.objective in ("unsupervised", "hybrid")
    triplets = _read_triplets(cfg) if supervised else []
    sentences = _read_sentences(cfg) if unsupervised else []
    if cfg.subset:
        triplets, sentences = triplets[: cfg.subset], sentences[: cfg.subset]
    return EmbedData(triplets, sentences)


def _read_triplets(cfg: EmbedConfig) -> list[Triplet]:
    if cfg.dataset and not cfg.train_file:
        from layerwise.data.hub import read_triplets

        return read_triplets(cfg.dataset, cfg.train_columns, cfg.subset)
    if cfg.train_file:
        path = Path(cfg.train_file)
        if path.suffix == ".csv" and cfg.train_columns == ["anchor", "positive", "negative"]:
            return read_nli_csv(path)
        return read_triplet_table(path, cfg.train_columns)
    snli = Path(cfg.data_dir) / "senteval" / "SNLI"
    if not snli.is_dir():
        raise DataError(snli, "SNLI folder not found: pass --data-dir (the folder holding senteval/SNLI) "
                              "or --train-file")
    return read_snli_triplets(snli)


def _read_sentences(cfg: EmbedConfig) -> list[str]:
    if cfg.dataset and not cfg.unsup_file:
        from layerwise.data.hub import read_sentences

        return read_sentences(cfg.dataset, cfg.subset)
    path = Path(cfg.unsup_file) if cfg.unsup_file else Path(cfg.data_dir) / "wiki1m_slice" / "wiki1m_for_simcse.txt"
    return read_lines(path, drop_unterminated_last=True)


# ------------------------------------------------------------------------------------------------ objectives
Batch = dict[str, Any]
Inputs = dict[str, tuple[torch.Tensor, torch.Tensor]]


class Objective:
    """A contrastive objective in two parts: which token batches to embed, and the loss of their embeddings.

    Calling it runs both (one forward per group). The split lets GradCache embed in chunks and lets distributed
    runs gather the candidates of every process (see training/distributed.py).
    """

    def inputs(self, batch: Batch) -> Inputs:
        raise NotImplementedError

    def loss(self, z: dict[str, torch.Tensor], cfg: "EmbedConfig") -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, encoder, batch: Batch, cfg: "EmbedConfig") -> torch.Tensor:
        return self.loss({k: encode_chunked(encoder, ids, mask, cfg.length_chunks)
                          for k, (ids, mask) in self.inputs(batch).items()}, cfg)


def encode_chunked(encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor, chunks: int) -> torch.Tensor:
    """encoder(input_ids, attention_mask) computed in `chunks` length-sorted pieces, each trimmed to its own
    longest sentence, returned in the input order (cfg.length_chunks; 1: one padded forward).

    The batch (and so the in-batch negatives) is unchanged; only padding is saved: SNLI (anchor, positive,
    negative) batches padded to their longest premise are 3.2x the real tokens in one forward, 1.7x in 4 sorted
    chunks. Each sentence's embedding does not depend on the others in the batch, so this equals the single forward
    up to float rounding (dropout masks differ, as between any two seeds). Expects right padding
    (TokenStore.collate). DistributedDataParallel wants one forward per backward: it gets the single forward.
    """
    if chunks <= 1 or input_ids.shape[0] < 2 * chunks or isinstance(encoder, torch.nn.parallel.DistributedDataParallel):
        return encoder(input_ids, attention_mask)
    lengths = attention_mask.sum(1)
    order = torch.argsort(lengths, stable=True)
    parts = []
    for index in torch.tensor_split(order, chunks):
        width = max(int(lengths[index].max()), 1)
        parts.append(encoder(input_ids[index, :width], attention_mask[index, :width]))
    return torch.cat(parts)[torch.argsort(order)]


def _sup_inputs(batch: Batch) -> Inputs:
    return {"sup": (batch["sup"]["input_ids"], batch["sup"]["attention_mask"])}


def _unsup_inputs(batch: Batch) -> Inputs:
    ids, mask = batch["unsup"]["input_ids"], batch["unsup"]["attention_mask"]
    return {"unsup": (torch.cat([ids, ids]), torch.cat([mask, mask]))}  # two dropout views of each sentence


def _supervised(z: torch.Tensor, cfg: "EmbedConfig") -> torch.Tensor:
    """InfoNCE on (anchor, positive, hard negative): rows are the N anchors, then positives, then negatives."""
    anchors, positives, negatives = z.view(3, -1, z.shape[-1]).unbind(0)
    all_positives, offset = gather_rows(positives)
    all_negatives, _ = gather_rows(negatives)
    return info_nce_offset(anchors, all_positives, all_negatives, cfg.temperature, cfg.hard_negative_weight, offset)


def _unsupervised(z: torch.Tensor, cfg: "EmbedConfig") -> torch.Tensor:
    """SimCSE: the second dropout view of each sentence is its positive, the others' second views negatives."""
    first, second = z.view(2, -1, z.shape[-1]).unbind(0)
    all_second, offset = gather_rows(second)
    return info_nce_offset(first, all_second, None, cfg.temperature, 0.0, offset)


@OBJECTIVES.register("supervised")
class Supervised(Objective):
    """NLI triplets: the entailment is the positive, the contradiction a hard negative, the batch in-batch negatives."""

    def inputs(self, batch):
        return _sup_inputs(batch)

    def loss(self, z, cfg):
        return _supervised(z["sup"], cfg)


@OBJECTIVES.register("unsupervised")
class Unsupervised(Objective):
    """Each sentence twice through the encoder with dropout on; the two views are positives."""

    def inputs(self, batch):
        return _unsup_inputs(batch)

    def loss(self, z, cfg):
        return _unsupervised(z["unsup"], cfg)


@OBJECTIVES.register("hybrid")
class Hybrid(Objective):
    """Supervised + unsup_weight x unsupervised."""

    def inputs(self, batch):
        return {**_sup_inputs(batch), **_unsup_inputs(batch)}

    def loss(self, z, cfg):
        return _supervised(z["sup"], cfg) + cfg.unsup_weight * _unsupervised(z["unsup"], cfg)


def objective_by_name(name: str):
    """The registered objective (classes are instantiated)."""
    found = OBJECTIVES.get(name)
    return found() if isinstance(found, type) else found


def make_batch_source(data: EmbedData, store: TokenStore, cfg: EmbedConfig,
                      dist_info: distributed.DistInfo | None = None) -> tuple[Callable[[int], Any], int]:
    """(epoch -> batches, batches per epoch). An epoch walks the triplets (or the sentences when unsupervised);
    in hybrid mode the sentences are drawn alongside, cycling. In a distributed run every process draws the same
    global batch (batch_size x world_size) and keeps its own slice."""
    dist_info = dist_info or distributed.DistInfo()
    size, seed = cfg.train.batch_size * dist_info.world_size, cfg.train.seed
    main_n = len(data.triplets) or len(data.sentences)

    def batches(epoch: int):
        side = _cycle_sentences(data.sentences, size, seed, epoch) if data.triplets and data.sentences else None
        for index in epoch_batches(main_n, size, seed, epoch, min_size=max(2, size) if dist_info.enabled else 2):
            index = distributed.shard(index, dist_info)
            batch: Batch = {}
            if data.triplets:
                chosen = [data.triplets[i] for i in index]
                texts = [t.anchor for t in chosen] + [t.positive for t in chosen] + [t.negative for t in chosen]
                batch["sup"] = store.collate(texts)
            if data.sentences:
                picked = distributed.shard(next(side), dist_info) if side else index
                batch["unsup"] = store.collate([data.sentences[i] for i in picked])
            yield batch

    return batches, count_batches(main_n, size, min_size=max(2, size) if dist_info.enabled else 2)


def _cycle_sentences(sentences: list[str], size: int, seed: int, epoch: int):
    rounds = 0
    while True:
        yield from epoch_batches(len(sentences), size, seed + 7919, epoch * 1000 + rounds)
        rounds += 1


# ----------------------------------------------------------------------------------------------- the run
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class EmbedRun:
    """What train-embed produced."""

    run_dir: Path
    results: dict[str, Any]


def train_embed(cfg: EmbedConfig, run_dir: Path, resume: bool = False,
                log: Callable[[str], None] = print) -> EmbedRun:
    """Train, keep the best checkpoint on STS-B dev, then evaluate untrained vs trained on STS-B test."""
    from layerwise.modeling.encoder import SentenceEncoder
    from layerwise.modeling.backbone import quiet_transformers
    from layerwise.training.loop import Trainer

    data = load_embed_data(cfg)  # bad data fails before anything is written
    seed_everything(cfg.train.seed)
    device, dist_info = distributed.setup(cfg.train.device)
    with quiet_transformers():
        encoder = SentenceEncoder.from_pretrained(cfg.model, pooling=cfg.pooler, max_length=cfg.max_length,
                                                  device=str(device), **_pooler_kwargs(cfg))
    stsb_dev, stsb_test = _stsb_evaluator(cfg, "dev"), _stsb_evaluator(cfg, "test")  # fail before writing anything
    if dist_info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
    untrained = _untrained_scores(stsb_test, encoder, run_dir, resume) if dist_info.is_main else {}
    store = TokenStore(encoder.tokenizer, data.texts(), cfg.max_length)
    make_batches, steps = make_batch_source(data, store, cfg, dist_info)
    trainer = Trainer(
        model=encoder, param_groups=_param_groups(encoder, cfg), make_batches=make_batches, steps_per_epoch=steps,
        compute_loss=_compute_loss(cfg, encoder, dist_info), manual_backward=bool(cfg.grad_cache_chunk),
        evaluate=lambda: {"stsb_dev_spearman": stsb_dev(encoder)["spearman"]}, metric="stsb_dev_spearman",
        save_model=lambda path: encoder.save(path), run_dir=run_dir, cfg=cfg.train, device=device)
    if dist_info.is_main:
        log(f"training {cfg.model} + {cfg.pooler} ({cfg.objective}) on {len(data.triplets) or len(data.sentences)} "
            f"examples, {trainer.total_steps} steps -> {run_dir}")
    result = trainer.fit(resume=resume)
    results = _final_evaluation(cfg, run_dir, data, untrained, result, device) if dist_info.is_main else {}
    return EmbedRun(run_dir, results)


def _untrained_scores(stsb_test: Callable[[Any], dict], encoder, run_dir: Path, resume: bool) -> dict:
    """STS-B test of the starting point (kept in untrained.json so a resumed run reports it too)."""
    path = run_dir / "untrained.json"
    if resume and path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    scores = {"stsb_test": stsb_test(encoder)}
    _write_json(path, scores)
    return scores


def _compute_loss(cfg: EmbedConfig, encoder, dist_info) -> Callable[[Batch], torch.Tensor]:
    """The objective on a batch: plain, through DistributedDataParallel, and/or through GradCache."""
    from layerwise.training.grad_cache import gradcache_compute_loss

    forward = encoder
    if dist_info.enabled:
        forward = torch.nn.parallel.DistributedDataParallel(
            encoder, device_ids=[dist_info.local_rank] if encoder.device.type == "cuda" else None)
    objective = objective_by_name(cfg.objective)
    if cfg.grad_cache_chunk:
        if not isinstance(objective, Objective):
            raise ConfigError(f"grad_cache_chunk: objective '{cfg.objective}' does not split into inputs and loss")
        return gradcache_compute_loss(objective, forward, cfg, cfg.grad_cache_chunk)
    return lambda batch: objective(forward, batch, cfg)


def _pooler_kwargs(cfg: EmbedConfig) -> dict:
    from layerwise.modeling.poolers import AttentionPooler

    return {"scale": cfg.pooler_scale} if issubclass(POOLERS.get(cfg.pooler), AttentionPooler) else {}


def _param_groups(encoder, cfg: EmbedConfig) -> list[dict]:
    groups = [{"params": [p for p in encoder.backbone.parameters() if p.requires_grad], "lr": cfg.train.lr}]
    pooler_params = [p for p in encoder.pooler.parameters() if p.requires_grad]
    if pooler_params:
        groups.append({"params": pooler_params, "lr": cfg.pooler_lr})
    return groups


def _stsb_evaluator(cfg: EmbedConfig, split: str) -> Callable[[Any], dict]:
    from layerwise.data.sts import find_stsb, read_stsb
    from layerwise.evaluation.sts import evaluate_pairs

    pairs = read_stsb(find_stsb(Path(cfg.data_dir), split))
    if cfg.eval_subset:
        pairs = pairs.head(cfg.eval_subset)
    return lambda encoder: evaluate_pairs(encoder, pairs, cfg.eval_batch_size)


def _final_evaluation(cfg: EmbedConfig, run_dir: Path, data: EmbedData, untrained: dict, result, device) -> dict:
    """Reload the best model, freeze the static mix, and score every inference mode on STS-B dev and test."""
    from layerwise.modeling.encoder import SentenceEncoder
    from layerwise.modeling.backbone import quiet_transformers

    with quiet_transformers():
        best = SentenceEncoder.from_pretrained(str(run_dir / "best"), device=str(device))
    modes = ["full"]
    if best.pooler.uses_attention:
        sample = random.Random(cfg.train.seed).sample(data.texts(), min(cfg.static_sentences, len(data.texts())))
        best.calibrate_static(sample, cfg.eval_batch_size)
        _save_atomically(best, run_dir / "best")
        modes += ["static"]
    modes += [m for m in ("cls_last", "avg_last") if m != cfg.pooler]
    dev, test = _stsb_evaluator(cfg, "dev"), _stsb_evaluator(cfg, "test")
    trained = {}
    for mode in modes:
        best.mode = mode
        trained[mode] = {"stsb_dev": dev(best), "stsb_test": test(best)}
    best.mode = "full"
    _write_card(cfg, run_dir / "best", trained["full"])
    results = {"model": cfg.model, "pooler": cfg.pooler, "objective": cfg.objective, "untrained": untrained,
               "trained": trained, "best_step": result.best_step, "steps": result.global_step,
               "train_seconds": round(result.seconds, 1), "skipped_batches": result.skipped_batches}
    _write_json(run_dir / "eval.json", results)  # written last: its presence marks a finished run
    return results


def _save_atomically(encoder, target: Path) -> None:
    from layerwise.training.checkpoint import atomic_dir, commit_dir

    tmp = atomic_dir(target)
    encoder.save(tmp)
    commit_dir(tmp, target)


def _write_card(cfg: EmbedConfig, directory: Path, scores: dict) -> None:
    """A Hub model card (README.md) with the STS-B scores of the saved (full) mode and the training command."""
    import shlex
    import sys

    from layerwise.model_card import write_model_card

    datasets = [cfg.dataset or cfg.train_file or "snli"] if cfg.objective != "unsupervised" else []
    if cfg.objective != "supervised":
        datasets.append(cfg.unsup_file or "wiki1m_for_simcse.txt")
    base = "sentence-transformers/all-MiniLM-L6-v2" if cfg.model.lower() == "all-minilm-l6-v2" else cfg.model
    write_model_card(directory, base_model=base, pooler=cfg.pooler, mode="full", datasets=datasets, metrics=scores,
                     command="layerwise " + " ".join(shlex.quote(a) for a in sys.argv[1:]))


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def summary_table(results: dict) -> str:
    """Terminal table: STS-B Spearman x100 of the untrained model and each inference mode of the trained one."""
    lines = [f"{'model':<28} {'STS-B dev':>10} {'STS-B test':>11}",
             f"{'untrained (' + results['pooler'] + ')':<28} {'':>10} "
             f"{results['untrained']['stsb_test']['spearman']:>11.2f}"]
    for mode, scores in results["trained"].items():
        lines.append(f"{'trained, mode ' + mode:<28} {scores['stsb_dev']['spearman']:>10.2f} "
                     f"{scores['stsb_test']['spearman']:>11.2f}")
    return "\n".join(lines)
