"""Prompt data: verl-schema row files (`parquet`), `dataset.RLDataset` + `collate`, the resumable
`loader.StatefulLoader`, the quickstart `arithmetic` task, and `preprocess/` (raw datasets → parquet).
"""
