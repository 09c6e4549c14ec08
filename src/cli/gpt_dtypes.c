/* amp generate's --load-dtype and --precision for a GPT (gpt_dtypes.h). */
#include "cli/gpt_dtypes.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int cli_gpt_dtypes_parse(const char *cmd, const char *load, const char *prec, cli_gpt_dtypes *out, void (*usage)(FILE *)) {
    if (!strcmp(prec, "fp32")) out->compute = AMP_F32;
    else if (!strcmp(prec, "bf16")) out->compute = AMP_BF16;
    else if (!strcmp(prec, "fp16")) out->compute = AMP_F16;
    else return cli_usage_error(usage, "%s: --precision '%s' is not fp32, bf16 or fp16", cmd, prec);
    out->load = AMP_LOAD_DTYPE_KEEP;
    if (!load && out->compute != AMP_F32) out->load = (amp_load_dtype){AMP_LOAD_FLOAT, out->compute, AMP_Q8_0};
    if (load && amp_load_dtype_parse(load, &out->load) != AMP_OK)
        return cli_usage_error(usage, "%s: --load-dtype '%s': %s", cmd, load, amp_last_error());
    return 0;
}

amp_status cli_gpt_dtypes_apply(amp_module *m, const cli_gpt_dtypes *d, char *label, size_t n) {
    if (amp_gpt_set_load_dtype(m, d->load) != AMP_OK) return amp_last_status();
    amp_load_dtype ld;
    if (amp_gpt_get_load_dtype(m, &ld) != AMP_OK) return amp_last_status();
    if (d->compute != AMP_F32) {
        amp_module_io io = {AMP_DTYPE_COUNT, true, d->compute, AMP_DTYPE_COUNT};
        if (amp_module_set_io(m, &io) != AMP_OK) return amp_last_status();
    }
    /* without autocast a half model computes in its weights' dtype, as torch's model.to(dtype) */
    amp_dtype c = d->compute != AMP_F32 ? d->compute : ld.kind == AMP_LOAD_FLOAT ? ld.dtype : AMP_F32;
    snprintf(label, n, "load %s, compute %s", amp_load_dtype_name(ld), c == AMP_F32 ? "fp32" : c == AMP_BF16 ? "bf16" : "fp16");
    return AMP_OK;
}

bool cli_is_gpt2_dir(const char *path) {
    char cfg[4096];
    if (!path || snprintf(cfg, sizeof cfg, "%s/config.json", path) >= (int)sizeof cfg) return false;
    FILE *f = fopen(cfg, "rb");
    if (!f) return false;
    enum { MAX = 1 << 20 }; /* a config.json is a few KB */
    char *buf = malloc(MAX + 1);
    size_t n = buf ? fread(buf, 1, MAX, f) : 0;
    fclose(f);
    bool yes = false;
    if (buf && n < MAX) {
        buf[n] = 0;
        cJSON *j = cJSON_Parse(buf);
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
        yes = cJSON_IsString(mt) && !strcmp(mt->valuestring, "gpt2");
        cJSON_Delete(j);
    }
    free(buf);
    return yes;
}
