#!/usr/bin/env python3
"""Generates tests/api_walk.inc: one caller per public function of include/amp/*.h
for tests/test_api_robustness.c, which walks the whole API with NULL pointers, wrong
dtypes, wrong ranks, mismatched shapes, negative and huge sizes.

    python3 tools/gen_api_walk.py        (after adding or changing a public function)

The list of functions is read from the headers, not written by hand; the test parses
the headers itself too and fails when a declared function has no caller here. Each
caller maps every parameter to an argument source by its C type (the table TYPES
below); the variant number picks the kind of bad input (see the test file).
A handful of functions need a special argument or cleanup; they are listed in
SPECIAL with the reason."""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))


def declarations():
    out = []
    hdir = os.path.join(ROOT, "include", "amp")
    for name in sorted(os.listdir(hdir)):
        if not name.endswith(".h"):
            continue
        s = open(os.path.join(hdir, name)).read()
        s = re.sub(r"/\*.*?\*/", "", s, flags=re.S)
        s = re.sub(r"//[^\n]*", "", s)
        s = re.sub(r"#ifdef __cplusplus.*?#endif", "", s, flags=re.S)
        s = "\n".join(l for l in s.split("\n") if not l.strip().startswith("#"))
        flat, depth = [], 0
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif depth == 0:
                flat.append(ch)
        for st in "".join(flat).split(";"):
            st = " ".join(st.split())
            st = re.sub(r"^AMP_API ", "", st)  # the export mark (amp/base.h), not part of the type
            if "typedef" in st or "(" not in st:
                continue
            m = re.match(r"^(.*?)\b(amp_\w+)\s*\((.*)\)$", st)
            if not m:
                sys.exit(f"gen_api_walk: cannot parse declaration: {st}")
            ret, fn, params = m.group(1).strip(), m.group(2), m.group(3).strip()
            ps = []
            if params and params != "void":
                for p in params.split(","):
                    p = p.strip()
                    fp = re.match(r"^(.*?)\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)$", p)  # a function pointer
                    if fp:
                        ps.append((fp.group(1).strip() + "(*)(" + fp.group(3).replace(" ", "") + ")", fp.group(2)))
                        continue
                    pm = re.match(r"^(.*?)\b(\w+)$", p)
                    ps.append((" ".join(pm.group(1).split()).replace(" *", "*").replace("* ", "*"), pm.group(2)))
            out.append((name, ret.replace(" *", "*").replace("* ", "*"), fn, ps))
    return out


# C type (spaces around '*' removed) -> argument expression; `pos` is the
# parameter's index among parameters of the same class, `i` its index overall.
TYPES = {
    "amp_tensor*": "arg_tensor(b, v, {pos})",
    "constamp_tensor*": "arg_tensor(b, v, {pos})",
    "amp_tensor*const*": "arg_tensors(b, v)",
    "amp_tensor**": "arg_tensor_out(b, v, {pos})",
    "amp_module*": "(amp_module *)arg_obj(b, v, b->module)",
    "constamp_module*": "(amp_module *)arg_obj(b, v, b->module)",
    "amp_optim*": "(amp_optim *)arg_obj(b, v, b->optim)",
    "constamp_optim*": "(amp_optim *)arg_obj(b, v, b->optim)",
    "amp_scaler*": "(amp_scaler *)arg_obj(b, v, b->scaler)",
    "constamp_scaler*": "(amp_scaler *)arg_obj(b, v, b->scaler)",
    "amp_loader*": "(amp_loader *)arg_obj(b, v, b->loader)",
    "constamp_loader*": "(amp_loader *)arg_obj(b, v, b->loader)",
    "amp_safetensors*": "(amp_safetensors *)arg_obj(b, v, b->st)",
    "constamp_safetensors*": "(amp_safetensors *)arg_obj(b, v, b->st)",
    "amp_gguf*": "(amp_gguf *)arg_obj(b, v, b->gguf)",
    "constamp_gguf*": "(amp_gguf *)arg_obj(b, v, b->gguf)",
    "amp_gguf_tensor_info*": "(amp_gguf_tensor_info *)arg_obj(b, v, b->scratch)",
    "amp_gguf_type*": "(amp_gguf_type *)arg_obj(b, v, b->scratch)",
    "constvoid**": "(const void **)arg_obj(b, v, b->scratch)",
    "amp_hf_dir*": "(amp_hf_dir *)arg_obj(b, v, b->hf)",
    "constamp_bert_load_opts*": "(const amp_bert_load_opts *)arg_opts(b, v, OPT_BERT_LOAD)",
    "constamp_embed_opts*": "(const amp_embed_opts *)arg_opts(b, v, OPT_EMBED)",
    "amp_bert_config*": "(amp_bert_config *)arg_obj(b, v, b->scratch)",
    "constint32_t*const*": "(const int32_t *const *)arg_obj(b, v, b->scratch)",
    "constamp_hf_dir*": "(amp_hf_dir *)arg_obj(b, v, b->hf)",
    "amp_checkpoint*": "(amp_checkpoint *)arg_obj(b, v, b->ckpt)",
    "constamp_checkpoint*": "(amp_checkpoint *)arg_obj(b, v, b->ckpt)",
    "amp_context*": "(amp_context *)arg_obj(b, v, b->ctx)",
    "amp_scope*": "(amp_scope *)NULL",
    "amp_checkpoint_lock*": "(amp_checkpoint_lock *)NULL",
    "amp_generator*": "(amp_generator *)arg_obj(b, v, &b->gen)",
    "amp_dist_group*": "(amp_dist_group *)arg_obj(b, v, b->group)",
    "constamp_dist_group*": "(amp_dist_group *)arg_obj(b, v, b->group)",
    "amp_ddp*": "(amp_ddp *)arg_obj(b, v, b->ddp)",
    "constamp_ddp*": "(amp_ddp *)arg_obj(b, v, b->ddp)",
    "constamp_ddp_opts*": "(const amp_ddp_opts *)arg_opts(b, v, OPT_DDP)",
    "amp_dist_work*": "(amp_dist_work *)NULL",  # a handle is consumed by wait: only NULL is a fair argument
    "amp_dist_stats*": "(amp_dist_stats *)arg_obj(b, v, b->scratch)",
    "amp_ddp_stats*": "(amp_ddp_stats *)arg_obj(b, v, b->scratch)",
    "double*": "(double *)arg_obj(b, v, b->scratch)",
    "char***": "(char ***)NULL",
    "amp_grad_hook_fn": "arg_hook(v)",
    "amp_backward_callback_fn": "arg_callback(v)",
    "amp_tokenizer*": "(amp_tokenizer *)arg_obj(b, v, b->tok)",
    "amp_qtensor*": "(amp_qtensor *)arg_obj(b, v, b->qt)",
    "constamp_qtensor*": "(amp_qtensor *)arg_obj(b, v, b->qt)",
    "amp_qtype*": "(amp_qtype *)arg_obj(b, v, b->scratch)",
    "amp_load_dtype*": "(amp_load_dtype *)arg_obj(b, v, b->scratch)",
    "amp_load_dtype": "arg_load_dtype(v)",
    "void(*)(void*owner)": "arg_release(v)",
    "constamp_tokenizer*": "(amp_tokenizer *)arg_obj(b, v, b->tok)",
    "amp_text_dataset*": "(amp_text_dataset *)arg_obj(b, v, b->text)",
    "constamp_text_dataset*": "(amp_text_dataset *)arg_obj(b, v, b->text)",
    "constamp_text_opts*": "(const amp_text_opts *)arg_opts(b, v, OPT_TEXT)",
    "constamp_wordpiece_opts*": "(const amp_wordpiece_opts *)arg_obj(b, v, b->scratch)",
    "constamp_encode_opts*": "(const amp_encode_opts *)arg_obj(b, v, b->scratch)",
    "constamp_chat_msg*": "(const amp_chat_msg *)arg_obj(b, v, b->scratch)",
    "amp_text_digest*": "(amp_text_digest *)arg_obj(b, v, b->scratch)",
    "constint32_t*": "(const int32_t *)arg_obj(b, v, b->scratch)",
    "int32_t**": "(int32_t **)arg_obj(b, v, &b->outptr)",
    "char**": "(char **)arg_obj(b, v, &b->outptr)",
    "FILE*": "(FILE *)arg_obj(b, v, b->devnull)",
    "amp_idx*": "(amp_idx *)arg_obj(b, v, &b->idx)",
    "amp_dataset*": "(amp_dataset *)arg_obj(b, v, &b->ds_out)",
    "constamp_dataset*": "(amp_dataset *)arg_obj(b, v, &b->ds)",
    "amp_safetensors_info*": "(amp_safetensors_info *)arg_obj(b, v, b->scratch)",
    "amp_format_info*": "(amp_format_info *)arg_obj(b, v, b->scratch)",
    "amp_opt_config*": "(amp_opt_config *)arg_obj(b, v, b->scratch)",
    "amp_policy*": "(amp_policy *)arg_obj(b, v, b->scratch)",
    "amp_scaler_state*": "(amp_scaler_state *)arg_obj(b, v, b->scratch)",
    "constamp_policy*": "(const amp_policy *)arg_opts(b, v, OPT_POLICY)",
    "constamp_scaler_state*": "(const amp_scaler_state *)arg_opts(b, v, OPT_SCALER_STATE)",
    "constamp_optim_opts*": "(const amp_optim_opts *)arg_opts(b, v, OPT_OPTIM)",
    "constamp_scaler_opts*": "(const amp_scaler_opts *)arg_opts(b, v, OPT_SCALER)",
    "constamp_conv_params*": "(const amp_conv_params *)arg_opts(b, v, OPT_CONV)",
    "constamp_pool_params*": "(const amp_pool_params *)arg_opts(b, v, OPT_POOL)",
    "constamp_loss_opts*": "(const amp_loss_opts *)arg_opts(b, v, OPT_LOSS)",
    "constamp_lr_schedule*": "(const amp_lr_schedule *)arg_opts(b, v, OPT_LR)",
    "constamp_autocast_opts*": "(const amp_autocast_opts *)arg_opts(b, v, OPT_AUTOCAST)",
    "constamp_context_opts*": "(const amp_context_opts *)arg_opts(b, v, OPT_CONTEXT)",
    "constamp_module_class*": "(const amp_module_class *)arg_opts(b, v, OPT_MODULE_CLASS)",
    "constamp_function*": "(const amp_function *)arg_opts(b, v, OPT_FUNCTION)",
    "constamp_init_opts*": "(const amp_init_opts *)arg_opts(b, v, OPT_INIT)",
    "constamp_module_io*": "(const amp_module_io *)arg_opts(b, v, OPT_MODULE_IO)",
    "amp_module_io*": "(amp_module_io *)arg_obj(b, v, b->scratch)",
    "amp_setup*": "(amp_setup *)arg_obj(b, v, b->setup)",
    "constamp_setup*": "(amp_setup *)arg_obj(b, v, b->setup)",
    "int*": "(int *)arg_obj(b, v, b->scratch)",
    "amp_module*const*": "arg_modules(b, v)",
    "amp_optim*const*": "arg_optims(b, v)",
    "amp_function_ctx*": "(amp_function_ctx *)NULL",
    "constamp_function_ctx*": "(const amp_function_ctx *)NULL",
    "constamp_loader_opts*": "(const amp_loader_opts *)arg_opts(b, v, OPT_LOADER)",
    "constamp_kv*": "(const amp_kv *)arg_opts(b, v, OPT_KV)",
    "constamp_sdpa_opts*": "(const amp_sdpa_opts *)arg_opts(b, v, OPT_SDPA)",
    "amp_checkpoint_fn": "arg_ckpt_fn(v)",
    "constamp_checkpoint_opts*": "(const amp_checkpoint_opts *)arg_opts(b, v, OPT_CKPT)",
    "constamp_gpt_config*": "(const amp_gpt_config *)arg_opts(b, v, OPT_GPT)",
    "amp_gpt_config*": "(amp_gpt_config *)arg_obj(b, v, b->scratch)",
    "amp_gpt_cache*": "(amp_gpt_cache *)arg_obj(b, v, b->gpt_cache)",
    "constamp_gpt_cache*": "(amp_gpt_cache *)arg_obj(b, v, b->gpt_cache)",
    "constamp_gpt_generate_opts*": "(const amp_gpt_generate_opts *)arg_opts(b, v, OPT_GEN)",
    "constamp_llama_config*": "(const amp_llama_config *)arg_opts(b, v, OPT_LLAMA)",
    "amp_llama_config*": "(amp_llama_config *)arg_obj(b, v, b->scratch)",
    "amp_llama_cache*": "(amp_llama_cache *)arg_obj(b, v, b->llama_cache)",
    "constamp_llama_cache*": "(amp_llama_cache *)arg_obj(b, v, b->llama_cache)",
    "constamp_llama_generate_opts*": "(const amp_llama_generate_opts *)arg_opts(b, v, OPT_LLAMA_GEN)",
    "constint64_t**": "(const int64_t **)arg_obj(b, v, b->scratch)",
    "amp_train_state*": "(amp_train_state *)arg_opts(b, v, OPT_TRAIN_STATE)",
    "constamp_train_state*": "(const amp_train_state *)arg_opts(b, v, OPT_TRAIN_STATE)",
    "constchar*": "arg_str(v, {pos})",
    "constchar*const*": "arg_names(v)",
    "constchar**": "(const char **)arg_obj(b, v, b->scratch)",
    "char*": "(char *)arg_obj(b, v, b->scratch)",
    "void*": "arg_obj(b, v, b->scratch)",
    "void**": "(void **)arg_obj(b, v, &b->outptr)",
    "constvoid*": "arg_obj(b, v, b->scratch)",
    "constfloat*": "(const float *)arg_obj(b, v, b->scratch)",
    "constuint16_t*": "(const uint16_t *)arg_obj(b, v, b->scratch)",
    "constuint8_t*": "(const uint8_t *)arg_obj(b, v, b->scratch)",
    "float*": "(float *)arg_obj(b, v, b->scratch)",
    "uint16_t*": "(uint16_t *)arg_obj(b, v, b->scratch)",
    "uint8_t*": "(uint8_t *)arg_obj(b, v, b->scratch)",
    "int64_t*": "(int64_t *)arg_obj(b, v, b->scratch)",
    "size_t*": "(size_t *)arg_obj(b, v, b->scratch)",
    "uint64_t*": "(uint64_t *)arg_obj(b, v, b->scratch)",
    "bool*": "(bool *)arg_obj(b, v, b->scratch)",
    "amp_dtype*": "(amp_dtype *)arg_obj(b, v, b->scratch)",
    "amp_cpu_path*": "(amp_cpu_path *)arg_obj(b, v, b->scratch)",
    "amp_opt_level*": "(amp_opt_level *)arg_obj(b, v, b->scratch)",
    "amp_device*": "(amp_device *)arg_obj(b, v, b->scratch)",
    "amp_cuda_info*": "(amp_cuda_info *)arg_obj(b, v, b->scratch)",
    "constint64_t*": "arg_shape(v)",
    "constint*": "arg_dims(v)",
    "int": "arg_int(v, {i})",
    "int64_t": "arg_i64(v, {i})",
    "size_t": "arg_size(v)",
    "uint64_t": "(uint64_t)arg_i64(v, {i})",
    "uint32_t": "(uint32_t)arg_i64(v, {i})",
    "uint16_t": "(uint16_t)arg_i64(v, {i})",
    "uint8_t": "(uint8_t)arg_i64(v, {i})",
    "unsigned": "(unsigned)arg_i64(v, {i})",
    "bool": "arg_bool(v)",
    "double": "arg_double(v, {i})",
    "float": "(float)arg_double(v, {i})",
}
ENUMS = ["amp_switch", "amp_dtype", "amp_cpu_path", "amp_mem_category", "amp_status", "amp_format", "amp_autocast_table",
         "amp_cast_category", "amp_gelu_approx", "amp_opt_level", "amp_text_split", "amp_tok_special", "amp_dist_op", "amp_grad_comm",
         "amp_device", "amp_gguf_type", "amp_rope_layout", "amp_qtype"]
for e in ENUMS:
    TYPES[e] = "(" + e + ")arg_enum(v)"

# Functions whose arguments or results need care, with the reason.
SPECIAL = {
    # destructors: a bank object passed here would be freed twice; NULL (variant 0) only
    "destructor": r"_free$|_close$|^amp_scope_end$|^amp_dataset_free$|^amp_idx_free$",
    # takes ownership of its children: give it fresh ones each call
    "amp_nn_sequential": "children are owned (freed on failure too): fresh modules per call",
    # take ownership of a tensor or module argument (on failure too): a fresh one per call
    "takes_tensor": r"^amp_module_(register_parameter|register_buffer|set_parameter)$",
    "takes_module": r"^amp_module_(register_module|append)$",
    # return a module the tree owns (borrowed), not a new one
    "borrowed_module": r"^(amp_module_(get_child|child_at|register_module)|amp_setup_scaler|amp_context_scaler)$",
    # returns the tensor it was given with one more reference
    "amp_tensor_retain": "an extra reference to drop",
    # fills a caller buffer of n elements: a huge n with a real buffer breaks the
    # caller's side of the contract, which no library can detect
    "caller_sized": r"^amp_randperm$",
    # end the process (abort) or the bank's world (finalize): never called by the walk
    "never": r"^amp_dist_(abort|finalize)$",
}

# Pointer results that are new objects to free (others are borrowed, or new
# tensors the enclosing scope drops).
FREE_RESULT = {
    "amp_module*": "amp_module_free",
    "amp_optim*": "amp_optim_free",
    "amp_scaler*": "amp_scaler_free",
    "amp_loader*": "amp_loader_free",
    "amp_safetensors*": "amp_safetensors_free",
    "amp_gguf*": "amp_gguf_close",
    "amp_hf_dir*": "amp_hf_dir_close",
    "amp_checkpoint*": "amp_checkpoint_close",
    "amp_context*": "amp_context_free",
    "amp_setup*": "amp_setup_free",
    "amp_scope*": "amp_scope_end",
    "amp_checkpoint_lock*": "amp_checkpoint_unlock",
    "amp_tokenizer*": "amp_tokenizer_free",
    "amp_qtensor*": "amp_qtensor_free",
    "amp_text_dataset*": "amp_text_dataset_free",
    "amp_gpt_cache*": "amp_gpt_cache_free",
    "amp_llama_cache*": "amp_llama_cache_free",
    "amp_ddp*": "amp_ddp_free",
    "amp_dist_work*": "amp_dist_wait",
}

# int parameters that count the entries of a caller's array: "huge" would only
# make the library read past the caller's memory, so they get at most the
# number of entries the test's arrays hold (negative ones are still tried).
COUNT_NAMES = {"n", "n_meta", "ndims", "max", "n_outputs", "n_inputs", "n_models"}

KIND = {"amp_status": "K_STATUS", "int": "K_INT", "int64_t": "K_INT"}


def kind_of(ret):
    if ret in KIND:
        return KIND[ret]
    if ret.endswith("*"):
        return "K_PTR"
    if ret == "void":
        return "K_VOID"
    return "K_OTHER"


def gen():
    decls = declarations()
    lines = ["/* Generated by tools/gen_api_walk.py from include/amp/ (every *.h) -- do not edit. */", ""]
    destructor = re.compile(SPECIAL["destructor"])
    table = []
    for hdr, ret, fn, ps in decls:
        args = []
        counts = {}
        for i, (t, pname) in enumerate(ps):
            key = t.replace(" ", "")
            if key == "int" and pname in COUNT_NAMES and any("*" in q for q, _ in ps):
                args.append("arg_count(v)")
                continue
            if fn == "amp_nn_sequential" and key == "amp_module*const*":
                args.append("arg_fresh_modules(b, v)")
                continue
            if re.search(SPECIAL["takes_tensor"], fn) and key == "amp_tensor*":
                args.append("arg_fresh_tensor(b, v)")
                continue
            if re.search(SPECIAL["takes_module"], fn) and key == "amp_module*" and pname == "child":
                args.append("arg_fresh_module(b, v)")
                continue
            if key not in TYPES:
                sys.exit(f"gen_api_walk: {fn}: no argument source for type '{t}' (add it to TYPES)")
            cls = TYPES[key].split("(")[0]
            pos = counts.get(cls, 0)
            counts[cls] = pos + 1
            args.append(TYPES[key].format(pos=pos, i=i))
        call = f"{fn}({', '.join(args)})"
        k = kind_of(ret)
        body = []
        only_null = bool(destructor.search(fn))
        if only_null:
            body.append("    if (v != 0) { r->skipped = true; return; }")
        if re.search(SPECIAL["never"], fn):
            body.append("    r->skipped = true;")
            body.append("    return;")
            k = "K_NEVER"
        if re.search(SPECIAL["caller_sized"], fn):
            body.append("    if (v == V_HUGE) { r->skipped = true; return; }")
        if k == "K_NEVER":
            k = kind_of(ret)
        elif k == "K_VOID":
            body.append(f"    {call};")
        elif k == "K_STATUS":
            body.append(f"    amp_status ret = {call};")
            body.append("    r->failed = ret < 0;")
        elif k == "K_INT":
            body.append(f"    int64_t ret = (int64_t){call};")
            body.append("    r->failed = ret < 0;")
        elif k == "K_PTR":
            cret = ret.replace("const", "const ").replace("*", " *")
            body.append(f"    {cret} ret = {call};")
            body.append("    r->failed = ret == NULL;")
            bare = ret.replace("const", "")
            if ret in FREE_RESULT and not re.search(SPECIAL["borrowed_module"], fn):
                body.append(f"    if (ret) {FREE_RESULT[ret]}(ret);")
            if fn == "amp_tensor_retain":
                body.append("    if (ret) amp_tensor_free(ret);")
            del bare
        else:
            body.append(f"    (void){call};")
        has_ptr = any("*" in t for t, _ in ps)
        table.append((fn, hdr, k, has_ptr))
        lines.append(f"static void call_{fn}(api_bank *b, int v, api_result *r) {{")
        lines.append("    (void)b;")
        lines.append("    (void)v;")
        lines.extend(body)
        lines.append("    (void)r;")
        lines.append("}")
        lines.append("")
    lines.append("static const api_fn g_api[] = {")
    for fn, hdr, k, has_ptr in table:
        lines.append(f'    {{"{fn}", "{hdr}", {k}, {"true" if has_ptr else "false"}, call_{fn}}},')
    lines.append("};")
    lines.append(f"#define API_COUNT {len(table)}")
    out = os.path.join(ROOT, "tests", "api_walk.inc")
    with open(out + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(out + ".tmp", out)
    print(f"wrote {os.path.relpath(out, ROOT)}: {len(table)} functions")


if __name__ == "__main__":
    gen()
