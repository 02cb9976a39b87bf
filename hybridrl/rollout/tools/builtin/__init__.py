"""Built-in tools: `calculator` (a function tool), `Gsm8kTool` (verl's `calc_gsm8k_reward`) and
`CodeInterpreterTool` (`code_interpreter`: Python in a sandbox, local or SandboxFusion)."""
