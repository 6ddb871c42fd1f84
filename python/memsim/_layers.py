"""_layers.py — finds a model's transformer blocks from its module tree: the repeated block
of a ModuleList or Sequential (model.model.layers of LLaMA, transformer.h of GPT-2,
gpt_neox.layers ...), for any model, without a table of architectures. Used by
memsim.capture; `layers=` overrides it."""


def _container_types():
    import torch.nn as nn
    return (nn.ModuleList, nn.Sequential)


def find_blocks(model):
    """The list of blocks (modules) that are the model's layers, in order, or [] when the
    model has no container of at least two children of one class. Among candidates the one
    holding the most parameters wins (the decoder stack, not a list of heads or experts);
    ties go to the first in module order."""
    best, best_params = [], -1
    for _, mod in model.named_modules():
        if not isinstance(mod, _container_types()):
            continue
        kids = list(mod.children())
        if len(kids) < 2 or len({type(k) for k in kids}) != 1:
            continue
        if isinstance(kids[0], _container_types()):
            continue
        n = sum(p.numel() for p in mod.parameters())
        if n > best_params:
            best, best_params = kids, n
    return best


def resolve(model, layers):
    """The blocks capture uses: `layers` (a ModuleList, a list of modules, or a dotted
    attribute path such as "model.layers") or, when None, find_blocks(model)."""
    if layers is None:
        return find_blocks(model) if model is not None else []
    if isinstance(layers, str):
        obj = model
        for part in layers.split("."):
            if not hasattr(obj, part):
                raise ValueError("layers=%r: the model has no attribute %r" % (layers, part))
            obj = getattr(obj, part)
        layers = obj
    blocks = list(layers.children()) if isinstance(layers, _container_types()) else list(layers)
    import torch.nn as nn
    for b in blocks:
        if not isinstance(b, nn.Module):
            raise ValueError("layers=: %r is not a torch.nn.Module" % (b,))
    return blocks
