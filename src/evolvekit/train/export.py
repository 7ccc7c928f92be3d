"""``evolvekit export``: a run's policy as a plain Hugging Face folder (AgentEvolver's users ask for it, its #29).

A full checkpoint is loaded and saved again as model + tokenizer; a LoRA checkpoint (peft adapters) is merged into
its base model (``merge_and_unload``), so the folder loads with ``AutoModelForCausalLM.from_pretrained`` alone, no
peft and no evolvekit. A run folder exports its newest intact checkpoint."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

from evolvekit.errors import ConfigError
from evolvekit.train.checkpoint import checkpoint_problem

log = logging.getLogger(__name__)

STORE_FILE = "run.sqlite"  # a run folder holds it (store/sqlite.py)


def newest_intact_checkpoint(run_dir: Path) -> Path:
    """The newest checkpoint of a run folder whose files match their checksums (read only: nothing is rolled back)."""
    from evolvekit.store.sqlite import RunStore

    store = RunStore(run_dir / STORE_FILE)
    try:
        rows = store.checkpoints()
    finally:
        store.close()
    for row in reversed(rows):
        if checkpoint_problem(Path(row.path)) is None:
            return Path(row.path)
    raise ConfigError(f"{run_dir}: no intact checkpoint to export ({len(rows)} recorded)")


def export_policy(source: Path, out: Path) -> Path:
    """Write ``source`` (a checkpoint folder, or a run folder: its newest intact checkpoint) to ``out`` as a plain
    transformers folder, LoRA merged. ``out`` must not exist; it appears whole or not at all."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source, out = Path(source), Path(out)
    if out.exists():
        raise ConfigError(f"--out {out} exists; export writes a new folder")
    if (source / STORE_FILE).is_file():
        source = newest_intact_checkpoint(source)
    problem = checkpoint_problem(source)
    if problem is not None:
        raise ConfigError(f"{source}: not an intact checkpoint ({problem})")
    lora = (source / "adapter_config.json").is_file()
    if lora:
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(str(source)).merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(str(source))
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "evolvekit_export.json").write_text(json.dumps({"source": str(source), "lora_merged": lora}) + "\n")
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("exported %s to %s%s", source, out, " (LoRA merged)" if lora else "")
    return out
