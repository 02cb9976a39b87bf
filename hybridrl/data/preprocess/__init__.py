"""Dataset preprocessors (raw dataset → verl-schema parquet); each module has `main(argv) -> int`.

Module paths, not modules, so `hybridrl preprocess <name>` imports only the one it runs.
"""

PREPROCESSORS: dict[str, str] = {
    "gsm8k": "hybridrl.data.preprocess.gsm8k",
    "math": "hybridrl.data.preprocess.math",
}
