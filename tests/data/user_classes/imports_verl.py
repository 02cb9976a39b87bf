"""A dataset file as verl's recipes write it: it subclasses verl's RLHFDataset (verl is not installed here)."""

from verl.utils.dataset import RLHFDataset


class CustomRLHFDataset(RLHFDataset):
    pass
