/* Reader for golden-data files written by tools/golden/golden_format.py
 * (PyTorch reference outputs). Format documented there. */
#ifndef AMP_TEST_GOLDEN_H
#define AMP_TEST_GOLDEN_H

#include "amp/amp.h"

typedef struct golden_file golden_file;

/* Loads tests/data/<name> (AMP_TEST_DATA_DIR); fails the test on error. */
golden_file *golden_open(const char *name);
void golden_close(golden_file *g);
/* A new tensor (caller frees) holding the record's values; fails the test
 * when the record is missing. */
amp_tensor *golden_tensor(golden_file *g, const char *record);
bool golden_has(golden_file *g, const char *record);
/* Number of records and the i-th record's name. */
int golden_count(golden_file *g);
/* Fails the test unless t's values match record `name` (|t-w| <= atol + rtol|w|). */
void golden_assert(golden_file *g, const char *name, const amp_tensor *t, double rtol, double atol);
/* Backward from out with the upstream gradient stored as "<case>/r", or with
 * ones (amp_backward) when the case has no such record. */
void golden_backward(golden_file *g, const char *case_name, amp_tensor *out);
const char *golden_name(golden_file *g, int i);

#endif
