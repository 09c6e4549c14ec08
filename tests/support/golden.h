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
const char *golden_name(golden_file *g, int i);

#endif
