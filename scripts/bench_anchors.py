"""The anchors of `scripts/bench-anchors.sh`: the shapes of `ragen-gym bench policy`, measured with
PyTorch + transformers (training step, `generate`, prefill) and llama.cpp (batch-1 decode, prefill).

Prints one JSON object with the same keys as `ragen-gym bench policy --json`, so the shell script
can put the two side by side (docs/benchmarks.md, "Anchors for `bench policy`"). Not part of CI.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time


def peak_rss_mib():
    # Linux: ru_maxrss is in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def xorshift_tokens(n_rows, n_cols, vocab):
    """The same xorshift64 stream as `bench policy` (the content does not matter for speed)."""
    state = 0x9E3779B97F4A7C15
    mask = (1 << 64) - 1
    rows = []
    for _ in range(n_rows):
        row = []
        for _ in range(n_cols):
            state ^= (state << 13) & mask
            state ^= state >> 7
            state ^= (state << 17) & mask
            row.append(state % vocab)
        rows.append(row)
    return rows


def load_hf(args):
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float32)
    return model


def train(args):
    """One process per mode, like ours: forward + backward + AdamW at B x T, every token but the
    first scored, loss -mean(logprob) - 0.001 mean(entropy), clip 1.0 (what `bench policy` runs)."""
    import torch

    model = load_hf(args)
    model.train()
    if args.mode == "lora":
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(
            r=args.lora_rank,
            lora_alpha=2 * args.lora_rank,
            lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            bias="none",
        )
        model = get_peft_model(model, cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6, weight_decay=0.01)
    vocab = model.config.vocab_size
    ids = torch.tensor(xorshift_tokens(args.batch, args.seq, vocab), dtype=torch.long)
    steps = []
    for _ in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        logits = model(input_ids=ids).logits[:, :-1, :].float()
        logp = torch.log_softmax(logits, dim=-1)
        lp = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        ent = -(logp.exp() * logp).sum(-1)
        n = lp.numel()
        loss = -(lp.sum() + 0.001 * ent.sum()) / n
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        del logits, logp, lp, ent, loss
        steps.append(time.perf_counter() - t0)
    measured = steps[args.warmup :]
    step_s = sum(measured) / len(measured)
    return {
        "training": [
            {
                "mode": args.mode,
                "batch": args.batch,
                "seq_len": args.seq,
                "trainable_params": sum(p.numel() for p in params),
                "step_s": step_s,
                "steps_s": measured,
                "tokens_per_s": args.batch * args.seq / step_s,
                "peak_rss_mib": peak_rss_mib(),
            }
        ]
    }


def sample_hf(args):
    import torch

    model = load_hf(args)
    model.eval()
    prompt = json.loads(args.prompt_ids)
    out = {"sampling": [], "prefill": []}
    with torch.inference_mode():
        for b in args.batches:
            ids = torch.tensor([prompt] * b, dtype=torch.long)
            att = torch.ones_like(ids)
            torch.manual_seed(1)
            t0 = time.perf_counter()
            gen = model.generate(
                input_ids=ids,
                attention_mask=att,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=args.new_tokens,
                pad_token_id=2,
            )
            secs = time.perf_counter() - t0
            new = gen[:, ids.shape[1] :]
            # Count up to and including the first end-of-turn token per row (as ours does).
            generated = 0
            for row in new.tolist():
                n = 0
                for tok in row:
                    n += 1
                    if tok in (0, 2):
                        break
                generated += n
            out["sampling"].append(
                {"batch": b, "generated_tokens": generated, "seconds": secs, "tokens_per_s": generated / secs}
            )
        if args.prefill_tokens > 0:
            ids = torch.tensor(xorshift_tokens(1, args.prefill_tokens, model.config.vocab_size), dtype=torch.long)
            model(input_ids=ids[:, :8])  # warm-up
            times = []
            for _ in range(args.prefill_reps):
                t0 = time.perf_counter()
                model(input_ids=ids, use_cache=True, logits_to_keep=1)
                times.append(time.perf_counter() - t0)
            out["prefill"].append(prefill_row(args.prefill_tokens, times))
    return out


def prefill_row(tokens, times):
    """The prefill row of `ragen-gym bench policy --json`: the rate of the median time."""
    secs = statistics.median(times)
    return {"tokens": tokens, "seconds": secs, "seconds_all": times, "tokens_per_s": tokens / secs}


def llama_cpp(args):
    from llama_cpp import Llama

    n_ctx = max(512, args.prefill_tokens + 64)
    llm = Llama(
        model_path=args.gguf,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_ubatch=n_ctx,
        verbose=False,
    )
    prompt = json.loads(args.prompt_ids)
    out = {"sampling": [], "prefill": []}
    # Batch-1 decode: prefill the prompt, then sample new tokens at temperature 1 (no top-k/p).
    llm.reset()
    t0 = time.perf_counter()
    generated = 0
    for tok in llm.generate(prompt, temp=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        generated += 1
        if tok in (0, 2) or generated >= args.new_tokens:
            break
    secs = time.perf_counter() - t0
    out["sampling"].append({"batch": 1, "generated_tokens": generated, "seconds": secs, "tokens_per_s": generated / secs})
    if args.prefill_tokens > 0:
        ids = xorshift_tokens(1, args.prefill_tokens, llm.n_vocab())[0]
        llm.reset()
        llm.eval(ids[:8])  # warm-up
        times = []
        for _ in range(args.prefill_reps):
            llm.reset()
            t0 = time.perf_counter()
            llm.eval(ids)
            times.append(time.perf_counter() - t0)
        out["prefill"].append(prefill_row(args.prefill_tokens, times))
    return out


def export_hf(gguf, dst):
    """Dequantise the GGUF into a float32 Hugging Face directory (transformers' own GGUF reader)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, f = os.path.split(gguf)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    # A model loaded through the GGUF quantizer refuses save_pretrained: copy its (already f32)
    # weights into a plain model of the same config.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.save_pretrained(dst)
    AutoTokenizer.from_pretrained(d, gguf_file=f).save_pretrained(dst)


def convert_f32_gguf(src, dst):
    """Dequantise every tensor of a GGUF to f32 with llama.cpp's own quantize entry point."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if rc != 0:
        sys.exit(f"llama_model_quantize({src} -> {dst}) failed with {rc}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["train", "hf-sample", "llama-cpp", "convert-f32", "export-hf"])
    p.add_argument("--hf-dir")
    p.add_argument("--gguf")
    p.add_argument("--out")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--mode", choices=["full", "lora"], default="full")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",") if x], default=[1, 16])
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--prefill-tokens", type=int, default=256)
    p.add_argument("--prefill-reps", type=int, default=5)
    p.add_argument("--prompt-ids", default="[1]")
    args = p.parse_args()
    if args.what == "convert-f32":
        convert_f32_gguf(args.gguf, args.out)
        return
    if args.what == "export-hf":
        export_hf(args.gguf, args.out)
        return
    result = {"train": train, "hf-sample": sample_hf, "llama-cpp": llama_cpp}[args.what](args)
    result["threads"] = args.threads
    print(json.dumps(result))


if __name__ == "__main__":
    main()
