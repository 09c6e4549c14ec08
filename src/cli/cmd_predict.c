/* amp predict: inference with a saved model on IDX images. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli/cli.h"

void cmd_predict_usage(FILE *f) {
    fprintf(f, "usage: amp predict --checkpoint FILE|DIR --input IMAGES.idx [OPTIONS]\n\n"
               "Runs a saved mlp or cnn on IDX images (u8 pixels scaled to [0,1] as in training, or f32\n"
               "values used as they are; plain or gzipped) and prints the accuracy when labels are given,\n"
               "otherwise one predicted class per line.\n\n"
               "  --checkpoint FILE|DIR      a model .safetensors (amp's or PyTorch's state_dict), or a\n"
               "                             checkpoint directory (its model.safetensors)\n"
               "  --input IDX                images, [N,28,28]\n"
               "  --labels IDX               labels, [N] u8: print the accuracy\n"
               "  --precision fp32|fp16|bf16 inference precision (default fp32); fp16/bf16 run under\n"
               "                             autocast with f32 weights\n"
               "  --model mlp|cnn            the architecture (default: the file's \"model\" metadata,\n"
               "                             else guessed from the tensor names)\n"
               "  --limit N                  the first N images only\n"
               "  --batch B                  images per forward pass (default 500)\n"
               "  --threads T                threads\n\n"
               "Exit status: 0 success, 1 failure (unreadable or mismatched files), 2 bad usage.\n");
}

/* A GPT's file (amp train --model gpt, or a GPT-2 state_dict), which
 * predict does not run: amp generate does. */
static bool is_gpt(const amp_safetensors *f) {
    const char *m = amp_safetensors_meta(f, "model");
    return (m && !strcmp(m, "gpt")) || amp_safetensors_find(f, "transformer.wte.weight") >= 0 ||
           amp_safetensors_find(f, "wte.weight") >= 0;
}

static const char *guess_model(const amp_safetensors *f) {
    const char *m = amp_safetensors_meta(f, "model");
    if (m && (!strcmp(m, "mlp") || !strcmp(m, "cnn"))) return m;
    int i = amp_safetensors_find(f, "0.weight");
    if (i >= 0) {
        amp_safetensors_info in;
        amp_safetensors_info_at(f, i, &in);
        if (in.ndim == 4) return "cnn";
    }
    if (amp_safetensors_find(f, "1.weight") >= 0 && amp_safetensors_find(f, "5.weight") >= 0) return "mlp";
    return NULL;
}

int cmd_predict(int argc, char **argv) {
    const char *ckpt = NULL, *input = NULL, *labels = NULL, *model_name = NULL, *precision = "fp32";
    long limit = 0, batch = 500, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) {
            cmd_predict_usage(stdout);
            return CLI_OK;
        }
        if (!v) return cli_usage_error(cmd_predict_usage, "predict: %s needs a value", a);
        i++;
        if (!strcmp(a, "--checkpoint")) ckpt = v;
        else if (!strcmp(a, "--input")) input = v;
        else if (!strcmp(a, "--labels")) labels = v;
        else if (!strcmp(a, "--model")) {
            if (!strcmp(v, "gpt"))
                return cli_usage_error(cmd_predict_usage, "predict: --model gpt: predict runs the image classifiers mlp and cnn; a "
                                                          "GPT generates text with 'amp generate --checkpoint FILE|DIR'");
            if (strcmp(v, "mlp") && strcmp(v, "cnn")) return cli_usage_error(cmd_predict_usage, "predict: --model '%s' is not mlp or cnn", v);
            model_name = v;
        } else if (!strcmp(a, "--precision")) {
            if (strcasecmp(v, "fp32") && strcasecmp(v, "fp16") && strcasecmp(v, "bf16"))
                return cli_usage_error(cmd_predict_usage, "predict: --precision '%s' is not fp32, fp16 or bf16", v);
            precision = v;
        } else if (!strcmp(a, "--limit")) {
            if (cli_parse_long(v, 1, 1L << 40, &limit)) return cli_usage_error(cmd_predict_usage, "predict: --limit: invalid value '%s'", v);
        } else if (!strcmp(a, "--batch")) {
            if (cli_parse_long(v, 1, 1 << 20, &batch)) return cli_usage_error(cmd_predict_usage, "predict: --batch: invalid value '%s'", v);
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_long(v, 1, 1024, &threads)) return cli_usage_error(cmd_predict_usage, "predict: --threads: invalid value '%s'", v);
        } else return cli_usage_error(cmd_predict_usage, "predict: unknown option '%s'", a);
    }
    if (!ckpt) return cli_usage_error(cmd_predict_usage, "predict: --checkpoint is required");
    if (!input) return cli_usage_error(cmd_predict_usage, "predict: --input is required");
    if (threads > 0) amp_set_num_threads((int)threads);
    amp_dtype half = !strcasecmp(precision, "fp16") ? AMP_F16 : !strcasecmp(precision, "bf16") ? AMP_BF16 : AMP_F32;

    size_t plen = strlen(ckpt) + 32;
    char *path = malloc(plen);
    if (!path) return cli_fail("predict: out of memory");
    struct stat sb;
    if (stat(ckpt, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(path, plen, "%s/model.safetensors", ckpt);
    else snprintf(path, plen, "%s", ckpt);

    int rc = CLI_FAIL;
    amp_safetensors *f = NULL;
    amp_module *m = NULL;
    amp_idx im, lb;
    memset(&im, 0, sizeof im);
    memset(&lb, 0, sizeof lb);
    amp_dataset ds;
    memset(&ds, 0, sizeof ds);
    uint8_t *fake_labels = NULL;
    int64_t *pred = NULL;

    f = amp_safetensors_read(path);
    if (!f) {
        rc = cli_fail("%s", amp_last_error());
        goto out;
    }
    if (!model_name && is_gpt(f)) {
        rc = cli_fail("predict: %s holds a GPT (%s); predict runs the image classifiers mlp and cnn: for text use 'amp generate "
                      "--checkpoint %s'", path, amp_safetensors_meta(f, "model") ? "model gpt" : "GPT-2 tensor names", ckpt);
        goto out;
    }
    if (!model_name) model_name = guess_model(f);
    if (!model_name) {
        rc = cli_fail("predict: cannot tell which model %s holds (no \"model\" metadata, and its tensor names are neither the "
                      "mlp's nor the cnn's); pass --model mlp|cnn", path); /* the file's content, not the usage: exit 1 */
        goto out;
    }
    amp_generator g = amp_generator_make(0);
    m = amp_model_build(model_name, &g);
    if (!m || amp_module_load_safetensors(m, f) != AMP_OK) {
        rc = cli_fail("predict: %s", amp_last_error());
        goto out;
    }
    if (amp_idx_load(input, &im) != AMP_OK) {
        rc = cli_fail("%s", amp_last_error());
        goto out;
    }
    if ((im.type != AMP_IDX_U8 && im.type != AMP_IDX_F32) || im.ndim != 3) {
        rc = cli_fail("predict: %s: expected u8 or f32 images [N,H,W], got IDX type 0x%02x of rank %d", input, im.type, im.ndim);
        goto out;
    }
    int64_t n = im.dims[0];
    if (limit > 0 && limit < n) n = limit;
    if (labels) {
        if (amp_idx_load(labels, &lb) != AMP_OK) {
            rc = cli_fail("%s", amp_last_error());
            goto out;
        }
        if (lb.type != AMP_IDX_U8 || lb.ndim != 1 || lb.dims[0] != im.dims[0]) {
            rc = cli_fail("predict: %s: expected %" PRId64 " u8 labels [N], got IDX type 0x%02x of rank %d with %" PRId64 " entries", labels,
                          im.dims[0], lb.type, lb.ndim, lb.ndim ? lb.dims[0] : 0);
            goto out;
        }
    }
    ds.n = n;
    ds.h = im.dims[1];
    ds.w = im.dims[2];
    ds.num_classes = 10;
    if (im.type == AMP_IDX_F32) ds.fimages = im.data;
    else ds.images = im.data;
    fake_labels = labels ? NULL : calloc((size_t)(n ? n : 1), 1);
    ds.labels = labels ? lb.data : fake_labels;
    pred = calloc((size_t)(n ? n : 1), sizeof *pred);
    if (!pred || !ds.labels) {
        rc = cli_fail("predict: out of memory");
        goto out;
    }
    amp_loader_opts lo = {.batch = batch, .shuffle = false};
    amp_loader *l = amp_loader_new(&ds, &lo);
    if (!l) {
        rc = cli_fail("predict: %s", amp_last_error());
        goto out;
    }
    bool was = cli_eval_begin(m);
    int64_t done = 0, correct = 0;
    bool ok = true;
    amp_scope *s;
    amp_tensor *x, *y;
    while ((s = cli_next_batch(l, &x, &y))) {
        if (half != AMP_F32) amp_autocast_enter(half);
        amp_tensor *logits = amp_module_forward(m, x);
        if (half != AMP_F32) amp_autocast_exit();
        amp_tensor *idx = NULL;
        if (logits) amp_max(logits, 1, false, &idx);
        if (!idx) {
            amp_scope_end(s);
            ok = false;
            break;
        }
        int64_t b = amp_tensor_dim(y, 0);
        const int64_t *pi = amp_tensor_data(idx), *py = amp_tensor_data(y);
        for (int64_t i = 0; i < b; i++) {
            pred[done + i] = pi[i];
            correct += pi[i] == py[i];
        }
        done += b;
        amp_scope_end(s);
    }
    cli_eval_end(m, was);
    amp_loader_free(l);
    if (!ok) {
        rc = cli_fail("predict: %s", amp_last_error());
        goto out;
    }
    if (labels) {
        printf("accuracy %.2f%% (%" PRId64 "/%" PRId64 ") %s, %s, %s\n", done ? 100.0 * (double)correct / (double)done : 0.0, correct,
               done, model_name, precision, path);
    } else {
        for (int64_t i = 0; i < done; i++) printf("%" PRId64 "\n", pred[i]);
    }
    rc = CLI_OK;
out:
    free(path);
    free(pred);
    free(fake_labels);
    amp_idx_free(&im);
    amp_idx_free(&lb);
    amp_module_free(m);
    amp_safetensors_free(f);
    return rc;
}
