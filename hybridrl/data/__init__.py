"""Prompt data: verl-schema row files (`parquet`), `dataset.RLDataset` + `collate`, the resumable
`loader.StatefulLoader` (ordered by a user's sampler through `sampler_order`), `factory` (the run's datasets and
sampler from `data.*`, a user's class from `user_code`, verl-style rows through `verl_rows`), the quickstart
`arithmetic` task, and `preprocess/` (raw datasets → parquet).
"""
