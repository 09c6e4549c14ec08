/* Chat templates (amp/text.h amp_chat_format).
 *
 * A model's chat template is a Jinja program (GGUF tokenizer.chat_template,
 * tokenizer_config.json's chat_template). amp runs no Jinja: it recognises
 * the format the template writes. ChatML is recognised by its two markers,
 * <|im_start|> and <|im_end|>; each message is
 *   <|im_start|>ROLE\nCONTENT<|im_end|>\n
 * and the generation prompt is <|im_start|>assistant\n. A template that
 * writes a system message of its own when the first message is not a
 * system one (SmolLM2's: {% if loop.first and messages[0]['role'] !=
 * 'system' %}{{ '<|im_start|>system\nYou are ...<|im_end|>\n' }}) has that
 * text taken from its string literal; as in the template, it is written
 * inside the loop over the messages, so no messages give no system text. */
#include <stdlib.h>
#include <string.h>

#include "amp/text.h"
#include "core/error.h"

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* The default system message of a ChatML template (unescaped, in *out), or
 * false when the template writes none. */
static bool default_system(const char *tpl, sbuf *out) {
    static const char head[] = "<|im_start|>system";
    const char *cond = strstr(tpl, "!= 'system'");
    if (!cond) cond = strstr(tpl, "!= \"system\"");
    const char *p = cond ? strstr(cond, head) : NULL;
    if (!p) return false;
    p += sizeof head - 1;
    if (p[0] == '\\' && p[1] == 'n') p += 2; /* the Jinja escape \n */
    else if (p[0] == '\n') p++;
    else return false;
    const char *e = strstr(p, "<|im_end|>");
    if (!e) return false;
    for (const char *q = p; q < e; q++) {
        if (q[0] == '\\' && q + 1 < e) { /* Jinja string escapes */
            char c = q[1] == 'n' ? '\n' : q[1] == 't' ? '\t' : q[1];
            sb_put(out, &c, 1);
            q++;
        } else {
            sb_put(out, q, 1);
        }
    }
    return true;
}

amp_status amp_chat_format(const char *chat_template, const amp_chat_msg *msgs, int n, bool add_generation_prompt,
                           char **out, size_t *n_out) {
    static const char *fn = "amp_chat_format";
    if (!out || !n_out) return amp_error(AMP_ERR_ARG, "%s: out and n_out must not be NULL", fn);
    *out = NULL;
    *n_out = 0;
    if (!chat_template) return amp_error(AMP_ERR_ARG, "%s: chat_template is NULL", fn);
    if (n < 0) return amp_error(AMP_ERR_ARG, "%s: n = %d messages is negative", fn, n);
    if (n > 0 && !msgs) return amp_error(AMP_ERR_ARG, "%s: msgs is NULL with n = %d", fn, n);
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return amp_error(AMP_ERR_ARG, "%s: message %d has a NULL %s", fn, i, msgs[i].role ? "content" : "role");
    if (!strstr(chat_template, "<|im_start|>") || !strstr(chat_template, "<|im_end|>"))
        return amp_error(AMP_ERR_UNSUPPORTED,
                         "%s: the chat template \"%.60s%s\" is not one amp recognises (ChatML: <|im_start|>role\\n"
                         "content<|im_end|>)",
                         fn, chat_template, strlen(chat_template) > 60 ? "..." : "");
    sbuf sys = {0}, b = {0};
    bool has_sys = default_system(chat_template, &sys);
    if (has_sys && n > 0 && strcmp(msgs[0].role, "system") != 0) {
        sb_str(&b, "<|im_start|>system\n");
        sb_put(&b, sys.s ? sys.s : "", sys.n);
        sb_str(&b, "<|im_end|>\n");
    }
    for (int i = 0; i < n; i++) {
        sb_str(&b, "<|im_start|>");
        sb_str(&b, msgs[i].role);
        sb_str(&b, "\n");
        sb_str(&b, msgs[i].content);
        sb_str(&b, "<|im_end|>\n");
    }
    if (add_generation_prompt) sb_str(&b, "<|im_start|>assistant\n");
    sb_put(&b, "", 0);
    bool oom = sys.oom || b.oom || !b.s;
    free(sys.s);
    if (oom) {
        free(b.s);
        return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    *out = b.s;
    *n_out = b.n;
    return AMP_OK;
}
