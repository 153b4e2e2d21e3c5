"""Does an evaluation config describe the model a run exported? (`export.json` records the training config)."""

from __future__ import annotations

from mmjax.config_validation.diff import mismatch_problems, outcome_diff
from mmjax.config_validation.rules import ConfigError

# What an evaluation config must share with the exported run: the model, the data (the split contents depend on
# preset/seed/tokenizer) and how pairs are scored — the similarity options of `mmjax.losses.similarity_options` and
# the Flow-CLIP head options. Paths to inputs only need to be set on both sides (`RELOCATABLE`).
EXPORT_FIELDS = ("task", "model.*", "data.*", "loss.similarity", "loss.s_h", "loss.match_on", "loss.solver",
                 "loss.alpha", "matching.*", "flowclip.*")
# ...except what only training reads: batch composition and augmentation, dropout, the training loss terms.
TRAINING_ONLY = ("data.batch_size", "data.augment", "data.region_drop_prob", "data.caption_drop_prob",
                 "data.train_split", "data.val_split", "model.dropout", "model.*.dropout", "flowclip.lambda_cimr",
                 "flowclip.cimr_kappa", "flowclip.cimr_kappa_stop_grad", "flowclip.mask_invalid_negatives",
                 "flowclip.donor_tries", "flowclip.logit_scale_init")


def check_export_matches(info: dict, config, allow_mismatch: bool = False) -> list[str]:
    """The `EXPORT_FIELDS` (less `TRAINING_ONLY`) in which `config` differs from the config recorded in `info`
    (from `load_exported`). Raises `ConfigError` naming each, with both values, unless `allow_mismatch`; an export
    that recorded no config is refused the same way, since nothing can be checked."""
    saved = info.get("config")
    if saved is None:
        if allow_mismatch:
            return []
        raise ConfigError([("export.json", "records no config (exported without one, before configs were "
                                           "recorded); re-export, or allow the mismatch to evaluate unchecked")],
                          header="cannot check that the config describes the exported model")
    diff = outcome_diff(saved, config, only=EXPORT_FIELDS, ignore=TRAINING_ONLY)
    if diff and not allow_mismatch:
        raise ConfigError(mismatch_problems(saved, config, diff),
                          header="the config does not describe the exported model (evaluate with the training "
                                 "config, or allow the mismatch explicitly)")
    return diff
