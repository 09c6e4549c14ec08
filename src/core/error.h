/* Internal error helpers. Every public function that fails calls one of these
 * with its own name first in the message: amp_error(AMP_ERR_SHAPE,
 * "amp_matmul: [%s] @ [%s]: inner dimensions %lld and %lld differ", ...). */
#ifndef AMP_CORE_ERROR_H
#define AMP_CORE_ERROR_H

#include "amp/base.h"

#if defined(__GNUC__)
#define AMP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AMP_PRINTF(a, b)
#endif

/* Records the message for this thread and returns st. */
amp_status amp_error(amp_status st, const char *fmt, ...) AMP_PRINTF(2, 3);
/* Same, returns NULL (for functions returning pointers). */
void *amp_error_null(amp_status st, const char *fmt, ...) AMP_PRINTF(2, 3);
/* Same, returns -1 (for functions returning a count or an index). */
int amp_error_neg(amp_status st, const char *fmt, ...) AMP_PRINTF(2, 3);

/* An error caused by the one already recorded on this thread (an argument is
 * NULL because the call that made it failed; a step failed because an op
 * inside it did): the recorded message stays first, as the root cause, and
 * the context follows it, "<root> (then: <context>)"; a further context
 * joins the list, "<root> (then: <context>; <context 2>)", so a chain reads
 * from the cause outwards. With no error recorded the context alone becomes
 * the message. The status is st (the recorded one when st is AMP_OK).
 * Every place that wraps amp_last_error() into a new message uses this
 * instead of formatting it in. */
amp_status amp_error_chain(amp_status st, const char *fmt, ...) AMP_PRINTF(2, 3);
void *amp_error_chain_null(amp_status st, const char *fmt, ...) AMP_PRINTF(2, 3);
/* amp_error_chain with the root cause given: a message saved earlier (the
 * error may have been overwritten meanwhile by a clean-up), or "" for none. */
amp_status amp_error_chain_from(amp_status st, const char *root, const char *fmt, ...) AMP_PRINTF(3, 4);

#define AMP_UNUSED(x) ((void)(x))

#endif
