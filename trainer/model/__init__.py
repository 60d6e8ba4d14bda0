"""The model: a BERT-family encoder whose parameter names are transformers' BertForPreTraining's, plus SpanBERT's SBO head;
or ELECTRA's discriminator and generator under ElectraForPreTraining's and ElectraForMaskedLM's names.

    config.py    ModelConfig: the family, the objective, the shape (presets tiny .. large) and the loss weights
    bert.py      BertForPretraining: encoder, losses, the heads weighted by trainer/heads.py's rows; the family's
                 differences (RoBERTa: no NSP head nor pooler, one token type, positions after padding_idx)
    heads.py     its heads' modules: MLM (sparse: masked positions only), NSP, SBO, and a head row's own module
    init.py      BERT's initialisation, which every network takes
    electra.py   ElectraForPretraining: replaced-token detection, a small generator sharing the embeddings
    modernbert.py  ModernBertForPretraining: ModernBERT's network (rotary, GeGLU, local/global attention), the
                 modernbert family's own, under ModernBertForMaskedLM's names
    families/    each family's spelling: how its transformers class names our tensors (BERT's, RoBERTa's, XLM's)
    hf_names.py  the one table between our tensors and a transformers checkpoint's (export, --init-from)

`build(config)` makes the network of a ModelConfig (`ModelConfig.network`: its family's own, else its objective's).
"""

from trainer.heads import IGNORE_INDEX  # noqa: F401 (where the model's users find the label of no prediction)
from trainer.model import electra, hf_names, modernbert
from trainer.model.bert import BertForPretraining
from trainer.model.config import PRESET_NAMES, ModelConfig
from trainer.model.electra import ElectraForPretraining
from trainer.model.modernbert import ModernBertForPretraining

NETWORK_CLASSES = {"bert": BertForPretraining, "electra": ElectraForPretraining, "modernbert": ModernBertForPretraining}
"""The trainer's network of each objective row's `network` (or a family row's own: ModernBERT's)."""
WEIGHT_READERS = {"bert": hf_names.from_transformers, "electra": electra.load_tensors, "modernbert": modernbert.load_tensors}
"""Each network's reader of a transformers state dict (or its shapes): (our tensors, what it lacks, what it left)."""
WEIGHT_WRITERS = {"bert": hf_names.to_transformers, "modernbert": modernbert.to_transformers}
"""Each network's writer of model.safetensors' tensors from our state dict (ELECTRA's export writes its own)."""
PARTS = {"bert": hf_names.PARTS, "electra": electra.PARTS, "modernbert": modernbert.PARTS}
"""Each network's tensors by part (part name -> name prefixes): what a source may lack, what a head warm-up trains."""
EMBEDDINGS = {"bert": "bert.embeddings.word_embeddings.weight", "modernbert": "model.embeddings.tok_embeddings.weight"}
"""Each network's token-embedding table in our state dict (the vocabulary export checks)."""


def build(config: ModelConfig, *, seed: int = 0):
    """The network of `config`'s objective, initialised from `seed`."""
    return NETWORK_CLASSES[config.network](config, seed=seed)


def weights_of(tensors: dict, config: ModelConfig, where: str):
    """WEIGHT_READERS' reader for `config`'s network: transformers' names (the family's, or ELECTRA's own with its
    generator's under `generator.`) to ours."""
    return WEIGHT_READERS[config.network](tensors, config, where)


__all__ = ["IGNORE_INDEX", "NETWORK_CLASSES", "PRESET_NAMES", "BertForPretraining", "ElectraForPretraining", "ModelConfig",
           "ModernBertForPretraining",
           "EMBEDDINGS", "PARTS", "WEIGHT_READERS", "WEIGHT_WRITERS", "build", "weights_of"]
