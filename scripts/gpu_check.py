#!/usr/bin/env python3
"""The PyTorch anchor and the report of scripts/gpu-check.sh (docs/gpu.md).

  gpu_check.py torch OUT_DIR [--device cuda]   PyTorch + transformers on the same work as the Rust
                                               side (OUT_DIR/workload.json): Hugging Face
                                               `generate` at the same batch, prompt and new tokens,
                                               and one training step on the same token counts,
                                               full fine-tuning and LoRA -> OUT_DIR/torch.json
  gpu_check.py parity OUT_DIR [--device cuda]  PyTorch's own f32 logits on the CPU and on the GPU
                                               for the weights and rows the correctness part left
                                               in OUT_DIR/parity/, beside ragen-gym's CPU and
                                               device logits -> OUT_DIR/parity.json
  gpu_check.py report OUT_DIR                  merge workload, rust-*.json and torch.json into
                                               OUT_DIR/report.json with the ratios (stdlib only)

The model is transformers' Qwen2ForCausalLM built from the same config.json with random weights
(torch.manual_seed); speed does not depend on the weights. Precision mirrors ragen-gym's:
sampling from bf16 weights, training with f32 master weights under bf16 autocast.
"""

import argparse
import copy
import json
import math
import os
import subprocess
import sys
import time


def load_json(path):
    with open(path) as f:
        return json.load(f)


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# PyTorch anchor


def torch_anchor(out_dir, device_name):
    import torch  # noqa: PLC0415 (only this subcommand needs torch)
    import transformers  # noqa: PLC0415

    w = load_json(os.path.join(out_dir, "workload.json"))
    dev = torch.device(device_name)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    cfg_dict = dict(w["config"])
    cfg_dict.pop("architectures", None)
    cfg_dict.pop("model_type", None)
    # Unset keys are null in workload.json; transformers 5 reads `head_dim` as given (Qwen2Attention:
    # `self.head_dim**-0.5` failed on None), so leave them to the config class's own defaults.
    cfg_dict = {k: v for k, v in cfg_dict.items() if v is not None}
    cfg = transformers.Qwen2Config(**cfg_dict) if w["config"]["model_type"] == "qwen2" else (
        transformers.LlamaConfig(**cfg_dict))
    cfg.use_cache = True
    torch.manual_seed(w["seed"])
    cls = (transformers.Qwen2ForCausalLM if w["config"]["model_type"] == "qwen2"
           else transformers.LlamaForCausalLM)
    model = cls(cfg).to(dev)  # f32 master weights
    vocab = cfg.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(w["seed"])

    def peak_reset():
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def peak():
        if not cuda:
            return {}
        return {
            "torch_max_allocated_mib": torch.cuda.max_memory_allocated() / 2**20,
            "torch_max_reserved_mib": torch.cuda.max_memory_reserved() / 2**20,
        }

    result = {
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "torch_cuda": torch.version.cuda,
        },
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if cuda else "cpu",
    }

    # Sampling: HF generate from bf16 weights, temperature 1, no top-k/top-p, exactly
    # max_new_tokens per row (min_new_tokens), same batch and prompt length.
    b, p, n = w["sample_batch"], w["sample_prompt_len"], w["sample_new_tokens"]
    ids = torch.randint(3, vocab, (b, p), generator=gen).to(dev)
    gen_model = copy.deepcopy(model).to(torch.bfloat16).eval()
    kwargs = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=2,
                  eos_token_id=None)
    with torch.no_grad():
        gen_model.generate(ids[:1], attention_mask=torch.ones_like(ids[:1]), max_new_tokens=2,
                           min_new_tokens=2, **kwargs)
        sync()
        peak_reset()
        t = time.perf_counter()
        outs = gen_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                  min_new_tokens=n, **kwargs)
        sync()
        secs = time.perf_counter() - t
    generated = int((outs.shape[1] - p) * b)
    result["sampling"] = {
        "batch": b, "prompt_tokens": p, "max_new_tokens": n, "generated_tokens": generated,
        "seconds": secs, "tokens_per_s": generated / secs, "ms_per_step": 1e3 * secs / n,
        "memory": peak(),
    }
    del gen_model, outs
    peak_reset()

    # One optimiser step: micro-batches of one sequence, gradient accumulation, clip 1.0, AdamW
    # (lr 1e-6, wd 0.01), the same policy-gradient-shaped loss as the Rust side.
    seqs = [torch.randint(3, vocab, (1, w["train_len"]), generator=gen).to(dev)
            for _ in range(w["train_seqs"])]

    def loss_of(m, x):
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=cuda):
            logits = m(input_ids=x, use_cache=False).logits[:, :-1]
        logp = torch.log_softmax(logits.float(), dim=-1)
        lp = logp.gather(-1, x[:, 1:].unsqueeze(-1)).squeeze(-1)
        ent = -(logp.exp() * logp).sum(-1)
        nscored = lp.numel()
        return -(lp.sum() + 0.001 * ent.sum()) / (nscored * len(seqs))

    def train(m, params):
        opt = torch.optim.AdamW(params, lr=1e-6, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01)

        def step():
            fwd = bwd = 0.0
            for x in seqs:
                sync()
                t0 = time.perf_counter()
                loss = loss_of(m, x)
                sync()
                t1 = time.perf_counter()
                loss.backward()
                sync()
                fwd += t1 - t0
                bwd += time.perf_counter() - t1
            t0 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
            return fwd, bwd, time.perf_counter() - t0

        warm = step()
        fwd, bwd, optim = step()
        tokens = w["train_seqs"] * w["train_len"]
        total = fwd + bwd + optim
        return {
            "trainable_params": sum(q.numel() for q in params),
            "sequences": w["train_seqs"], "seq_len": w["train_len"], "tokens": tokens,
            "warmup_step_s": sum(warm), "forward_s": fwd, "backward_s": bwd,
            "optimizer_s": optim, "step_s": total, "tokens_per_s": tokens / total,
        }

    modes = []
    model.train()
    peak_reset()
    row = train(model, [q for q in model.parameters()])
    row.update(mode="full", memory=peak())
    modes.append(row)
    # LoRA: frozen base, adapters on every linear layer of the decoder (PEFT's init: A
    # kaiming-uniform(a=sqrt(5)), B = 0; scale alpha / r).
    for q in model.parameters():
        q.requires_grad_(False)
    adapters = []
    r, alpha = w["lora_rank"], w["lora_alpha"]
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    class LoraLinear(torch.nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base
            self.a = torch.nn.Parameter(torch.empty(r, base.in_features, device=dev))
            torch.nn.init.kaiming_uniform_(self.a, a=math.sqrt(5))
            self.b = torch.nn.Parameter(torch.zeros(base.out_features, r, device=dev))
            self.scale = alpha / r

        def forward(self, x):
            return self.base(x) + (x @ self.a.t() @ self.b.t()) * self.scale

    for layer in model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for name in names:
                if hasattr(parent, name):
                    wrapped = LoraLinear(getattr(parent, name))
                    setattr(parent, name, wrapped)
                    adapters += [wrapped.a, wrapped.b]
    peak_reset()
    row = train(model, adapters)
    row.update(mode="lora", memory=peak())
    modes.append(row)
    result["train_step"] = {"modes": modes}
    write_json(os.path.join(out_dir, "torch.json"), result)
    print(json.dumps({"sampling_tokens_per_s": result["sampling"]["tokens_per_s"],
                      "train_tokens_per_s": {m["mode"]: m["tokens_per_s"] for m in modes}}))


# ---------------------------------------------------------------------------------------------
# Report


def gpu_info():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=20, check=True)
        return [line.strip() for line in out.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        return None


def ratio(ours, theirs):
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)) and theirs > 0:
        return ours / theirs
    return None


def report(out_dir):
    def part(name):
        path = os.path.join(out_dir, name)
        return load_json(path) if os.path.exists(path) else {"missing": name}

    rep = {
        "workload": part("workload.json"),
        "rust": {p: part(f"rust-{p}.json") for p in
                 ("correctness", "sampling", "train-step", "iteration-full", "iteration-lora")},
        "pytorch": part("torch.json"),
        "parity": part("parity.json"),
        "gpu": gpu_info(),
    }
    rust, torch_ = rep["rust"], rep["pytorch"]
    ratios = {}
    s_r, s_t = rust["sampling"].get("tokens_per_s"), torch_.get("sampling", {}).get("tokens_per_s")
    ratios["sampling_tokens_per_s_rust_over_pytorch"] = ratio(s_r, s_t)
    t_modes = {m["mode"]: m for m in torch_.get("train_step", {}).get("modes", [])}
    for m in rust["train-step"].get("modes", []):
        theirs = t_modes.get(m["mode"], {}).get("tokens_per_s")
        ratios[f"train_step_{m['mode']}_tokens_per_s_rust_over_pytorch"] = ratio(
            m["tokens_per_s"], theirs)
    rep["ratios"] = ratios
    rep["correctness_pass"] = rust["correctness"].get("pass")
    rep["iteration_timing_s"] = {
        mode: rust[f"iteration-{mode}"].get("timing_s") for mode in ("full", "lora")}
    rep["iteration_memory"] = {
        mode: rust[f"iteration-{mode}"].get("memory") for mode in ("full", "lora")}
    write_json(os.path.join(out_dir, "report.json"), rep)
    summary = {
        "correctness_pass": rep["correctness_pass"],
        "ratios": ratios,
        "iteration_timing_s": rep["iteration_timing_s"],
    }
    print(json.dumps(summary, indent=2, sort_keys=True))


# ---------------------------------------------------------------------------------------------
# f32 parity: is ragen-gym's CUDA-vs-CPU logit gap what f32 gives on these weights?


def parity(out_dir, device_name):
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415
    from safetensors.torch import load_file  # noqa: PLC0415

    d = os.path.join(out_dir, "parity")
    rows = load_json(os.path.join(d, "batch.json"))["rows"]
    ours = {k: load_file(os.path.join(d, f"logits-{k}.safetensors"))["logits"]
            for k in ("cpu", "device")}
    # No TF32 anywhere: ragen-gym multiplies f32 with CUBLAS_COMPUTE_32F (docs/gpu.md).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    result = {"positions": int(ours["cpu"].shape[0]), "torch": torch.__version__,
              "transformers": transformers.__version__}
    theirs = {}
    for where in ("cpu", device_name):
        t = time.time()
        # Eager attention: plain matmul + softmax, as ragen-gym computes it.
        model = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.join(d, "model"), dtype=torch.float32, attn_implementation="eager").to(where)
        model.eval()
        out = []
        with torch.no_grad():
            for ids in rows:
                x = torch.tensor([ids], device=where)
                out.append(model(x).logits[0].float().cpu())
        theirs["cpu" if where == "cpu" else "device"] = torch.cat(out)
        result[f"torch_{'cpu' if where == 'cpu' else 'device'}_s"] = time.time() - t
        del model

    def diff(a, b):
        return float((a - b).abs().max())

    result.update({
        "max_abs_logit": float(ours["cpu"].abs().max()),
        "torch_device_vs_torch_cpu": diff(theirs["device"], theirs["cpu"]),
        "ours_device_vs_ours_cpu": diff(ours["device"], ours["cpu"]),
        "ours_cpu_vs_torch_cpu": diff(ours["cpu"], theirs["cpu"]),
        "ours_device_vs_torch_device": diff(ours["device"], theirs["device"]),
    })
    write_json(os.path.join(out_dir, "parity.json"), result)
    print(json.dumps(result, indent=2, sort_keys=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torch")
    t.add_argument("out_dir")
    t.add_argument("--device", default="cuda")
    q = sub.add_parser("parity")
    q.add_argument("out_dir")
    q.add_argument("--device", default="cuda")
    r = sub.add_parser("report")
    r.add_argument("out_dir")
    args = ap.parse_args()
    if args.cmd == "torch":
        torch_anchor(args.out_dir, args.device)
    elif args.cmd == "parity":
        parity(args.out_dir, args.device)
    else:
        report(args.out_dir)


if __name__ == "__main__":
    main()
