"""`data.custom_cls` / `data.sampler` rules: a class path needs its class name (torch-free, no user code imported;
the class itself is loaded and checked when the datasets are built, `hybridrl.data.factory`)."""

from __future__ import annotations

from hybridrl.config.schema_data import DataConfig


def user_class_problems(data_cfg: DataConfig) -> list[str]:
    """One line per user class whose path is set without the name of the class inside it."""
    pairs = (("data.custom_cls.path", data_cfg.custom_cls.path, "data.custom_cls.name", data_cfg.custom_cls.name),
             ("data.sampler.class_path", data_cfg.sampler.class_path, "data.sampler.class_name",
              data_cfg.sampler.class_name))
    return [f"{path_key}={path!r} needs {name_key}: the name of the class inside it"
            for path_key, path, name_key, name in pairs if path and not name]


def user_class_files(data_cfg: DataConfig) -> list[tuple[str, str]]:
    """(key, file) of the user classes given as files (pkg:// modules are found on import, not here)."""
    files = []
    for key, path in (("data.custom_cls.path", data_cfg.custom_cls.path),
                      ("data.sampler.class_path", data_cfg.sampler.class_path)):
        if path and not path.startswith("pkg://"):
            files.append((key, path.removeprefix("file://")))
    return files
