"""Schema of the `data.*` section (verl's `data/legacy_data.yaml`, HEAD defaults)."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import section, setting


@dataclass
class ClassRefConfig:
    """A user class or function loaded from a file: `path` (a .py file or module) and `name`."""

    path: str | None = setting(None, "File or module that defines the class/function; null = use the built-in one.")
    name: str | None = setting(None, "Name of the class/function inside `path`.")


@dataclass
class SamplerConfig:
    """A curriculum sampler class (verl `data.sampler`)."""

    class_path: str | None = setting(None, "File or module that defines the sampler class; null = random/sequential.")
    class_name: str | None = setting(None, "Sampler class name inside `class_path`.")


@dataclass
class DataConfig:
    """Datasets, prompt formatting and batch size (`train_batch_size` counts prompts)."""

    tokenizer: str | None = setting(None, "Tokenizer path; null = the actor model's tokenizer.")
    use_shm: bool = setting(False, "Copy dataset files to /dev/shm before reading.")
    train_files: str | list[str] = setting(
        "~/data/rlhf/gsm8k/train.parquet", "Training parquet/jsonl file, or a list of them."
    )
    val_files: str | list[str] = setting(
        "~/data/rlhf/gsm8k/test.parquet", "Validation parquet/jsonl file, or a list of them."
    )
    train_max_samples: int = setting(-1, "Use at most this many training rows; -1 = all.")
    val_max_samples: int = setting(-1, "Use at most this many validation rows; -1 = all.")
    prompt_key: str = setting("prompt", "Column holding the chat messages of the prompt.")
    reward_fn_key: str = setting("data_source", "Column used to pick the reward function per row.")
    max_prompt_length: int = setting(512, "Prompt tokens kept after the chat template (see `truncation`).")
    max_response_length: int = setting(512, "Maximum generated tokens per response.")
    train_batch_size: int = setting(1024, "Prompts per training step (each gets rollout.n responses).")
    val_batch_size: int | None = setting(None, "Deprecated in verl; null = the whole validation set in one batch.")
    gen_batch_size: int | None = setting(
        None, "Prompts per generation batch; null = train_batch_size (verl reads it from code).", plus=True
    )
    tool_config_path: str | None = setting(
        None,
        "verl counts its tool schemas in prompt-length filtering; here the agent loop left-cuts a prompt that "
        "exceeds rollout.prompt_length with its tools, warned and counted (agent_loop/num_prompts_truncated).",
        ref="${oc.select:actor_rollout_ref.rollout.multi_turn.tool_config_path,null}",
    )
    function_tool_path: str | None = setting(
        None,
        "As tool_config_path, for multi_turn.function_tool_path.",
        ref="${oc.select:actor_rollout_ref.rollout.multi_turn.function_tool_path,null}",
    )
    return_raw_input_ids: bool = setting(False, "verl: prompt ids without the chat template for a reward model with its own tokenizer; no effect here (the reward model re-renders the chat with its own template).")
    return_raw_chat: bool = setting(True, "Also return the raw chat messages (agent loops need them).")
    return_full_prompt: bool = setting(False, "verl: the templated prompt text in the batch; no effect here (rollout dumps and reward functions get the decoded text).")
    shuffle: bool = setting(True, "Shuffle the training set every epoch.")
    seed: int | None = setting(None, "Shuffling seed; null = 1 as in verl.")
    dataloader_num_workers: int = setting(8, "Data loader worker processes; no effect (batches are read and tokenized in the trainer's process).")
    image_patch_size: int = setting(14, "Vision patch size; no effect (multimodal rows are refused).")
    validation_shuffle: bool = setting(False, "Shuffle the validation set; no effect (validation covers every row, so its metrics do not depend on order).")
    filter_overlong_prompts: bool = setting(False, "Drop prompts longer than max_prompt_length tokens.")
    filter_overlong_prompts_workers: int = setting(1, "Processes used to filter overlong prompts; no effect (filtering runs in the loading process).")
    truncation: str = setting(
        "error",
        "What to do with a prompt longer than max_prompt_length.",
        choices=("error", "left", "right", "middle"),
    )
    image_key: str = setting("images", "Column holding images; rows with any are refused (multimodal is not supported yet).")
    video_key: str = setting("videos", "Column holding videos; rows with any are refused (multimodal is not supported yet).")
    trust_remote_code: bool = setting(False, "Allow tokenizer/processor code from the model repo.")
    custom_cls: ClassRefConfig = section(ClassRefConfig, "A custom dataset class replacing the built-in one.")
    return_multi_modal_inputs: bool = setting(True, "Return processor outputs for multimodal rows; no effect (multimodal rows are refused).")
    sampler: SamplerConfig = section(SamplerConfig, "A custom (curriculum) sampler.")
    datagen: ClassRefConfig = section(ClassRefConfig, "A dynamic data generator class.")
    apply_chat_template_kwargs: dict = setting({}, "Extra kwargs for apply_chat_template, e.g. enable_thinking "
                                               "(prompts and agent-loop turns).")
    cache_dir: str = setting("~/.cache/verl/rlhf", "Where remote (HDFS) dataset files are copied; no effect (data files are local paths).", plus=True)
    need_tools_kwargs: bool = setting(False, "Rows carry extra_info.tools_kwargs for multi-turn tools (the tool "
                                      "agent reads them whenever present; either value).", plus=True)
    audio_key: str = setting("audios", "Column holding audio; rows with any are refused (multimodal is not supported yet).")
    mm_processor_kwargs: dict = setting({}, "Extra kwargs of the multimodal processor; no effect (multimodal rows are refused).")
