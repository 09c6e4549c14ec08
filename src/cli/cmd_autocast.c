/* amp autocast: the op table (which ops autocast casts, and to what). */
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_internal.h"

void cmd_autocast_usage(FILE *f) {
    fprintf(f, "usage: amp autocast [--table default|cpu] [--markdown]\n\n"
               "Lists every op with its autocast category: lower precision (cast to the region's\n"
               "f16/bf16), fp32 (cast to f32), promote (widest input type) or none.\n"
               "  --table default|cpu  PyTorch's CUDA lists (default) or its CPU lists\n"
               "  --markdown           print docs/autocast.md (both tables), as `make docs` does\n");
}

int cmd_autocast(int argc, char **argv) {
    amp_autocast_table table = AMP_AUTOCAST_TABLE_DEFAULT;
    bool md = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--markdown")) md = true;
        else if (!strcmp(argv[i], "--table") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "default")) table = AMP_AUTOCAST_TABLE_DEFAULT;
            else if (!strcmp(v, "cpu")) table = AMP_AUTOCAST_TABLE_CPU;
            else return cli_usage_error(cmd_autocast_usage, "autocast: --table '%s' is not default or cpu", v);
        } else {
            return cli_usage_error(cmd_autocast_usage, "autocast: unknown option '%s'", argv[i]);
        }
    }
    if (md) return amp_autocast_write_docs(stdout) == AMP_OK ? CLI_OK : cli_fail("%s", amp_last_error());
    printf("%-34s %s\n", "op", table == AMP_AUTOCAST_TABLE_CPU ? "category (cpu table)" : "category (default table)");
    for (int i = 0; i < AMP_OP_COUNT; i++)
        printf("%-34s %s\n", amp__op_table[i].name,
               amp_cast_category_name((amp_cast_category)amp_autocast_op_policy(amp__op_table[i].name, table)));
    return CLI_OK;
}
