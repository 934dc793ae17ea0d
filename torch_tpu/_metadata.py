"""The distribution name: this project is installed as `torch-tpu-c`, not
`torch-tpu` (Google's TorchTPU owns that name on PyPI, so `pip install -U
torch-tpu`, or a resolver meeting the name, would replace this project with
Google's). The import name stays `torch_tpu`.

Libraries that detect TorchTPU by distribution metadata under the import name,
e.g. Diffusers' `importlib.metadata.version("torch_tpu")`, would then find
nothing. install() adds a metadata finder at the end of sys.meta_path that
answers lookups of the name torch_tpu / torch-tpu with this distribution, only
when nothing earlier on the path has one (a real `torch-tpu` distribution, if
both were installed, is found first). Lists of all distributions
(`importlib.metadata.distributions()`) are not affected. It is in place once
torch_tpu is imported, which `import torch` does (autoload): a check made
before `import torch` (e.g. `import diffusers` as the very first import) still
finds nothing.
"""
import importlib.metadata
import re
import sys

DISTRIBUTION = "torch-tpu-c"
ALIASES = ("torch_tpu",)  # normalized names answered with DISTRIBUTION


def _normalized(name):
    return re.sub(r"[-_.]+", "_", name).lower()


class _AliasFinder:
    """A sys.meta_path entry that finds no modules, only distribution metadata."""

    distribution = DISTRIBUTION

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        return None

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        name = getattr(context, "name", None)
        if name is None or _normalized(name) not in ALIASES:
            return iter(())
        try:
            return iter((importlib.metadata.distribution(self.distribution),))
        except importlib.metadata.PackageNotFoundError:
            return iter(())


def install():
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
