//! `ragen-gym generate`: answer one chat prompt with a model (default: SmolLM2-135M-Instruct).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use ragen_gym_policy::{Message, SamplingParams};

/// Arguments of `ragen-gym generate`.
#[derive(clap::Args)]
pub struct Args {
    /// A .gguf file or a Hugging Face directory (default: the model installed by scripts/setup.sh).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The user message.
    #[arg(long)]
    pub prompt: String,
    /// System message (default: the one the model's chat template inserts, if any).
    #[arg(long)]
    pub system: Option<String>,
    /// Upper bound on generated tokens.
    #[arg(long, default_value_t = 128)]
    pub max_new_tokens: usize,
    /// Sampling seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Nucleus sampling threshold (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f64,
    /// Top-k sampling (0 = off).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Print one JSON object (`text`, `tokens`, `finish_reason`, timings) instead of the text.
    #[arg(long)]
    pub json: bool,
    /// Where the model runs.
    #[command(flatten)]
    pub device: crate::shared::device::DeviceArgs,
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let device = args.device.open()?;
    let t0 = Instant::now();
    let path = args
        .model
        .clone()
        .unwrap_or_else(ragen_gym_policy::default_model_path);
    let loaded = ragen_gym_policy::load_on(&path, &device).context("failed to load the model")?;
    let load_s = t0.elapsed().as_secs_f64();
    let model = loaded.frozen_model()?.for_sampling()?;
    let tok = &loaded.tokenizer;
    let mut messages = Vec::new();
    if let Some(sys) = args.system.clone().or_else(|| tok.default_system_prompt()) {
        messages.push(Message::system(sys));
    }
    messages.push(Message::user(args.prompt.clone()));
    let prompt = tok.encode_chat(&messages, true)?;
    let params = SamplingParams {
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        max_new_tokens: args.max_new_tokens,
        stop: vec![],
        seed: args.seed,
    };
    let t1 = Instant::now();
    let out = ragen_gym_policy::sample(&model, tok, std::slice::from_ref(&prompt), &params)
        .context("failed to generate")?;
    let gen_s = t1.elapsed().as_secs_f64();
    let s = &out[0];
    if args.json {
        let v = serde_json::json!({
            "text": s.text,
            "tokens": s.tokens.len(),
            "prompt_tokens": prompt.len(),
            "finish_reason": s.finish_reason,
            "load_s": load_s,
            "generate_s": gen_s,
            "tokens_per_s": s.tokens.len() as f64 / gen_s.max(1e-9),
            "model": loaded.source,
        });
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!("{}", s.text);
    }
    Ok(())
}
