/* amp — automatic mixed precision training and inference for C.
 * One include for the whole public API. */
#ifndef AMP_AMP_H
#define AMP_AMP_H

#include "amp/base.h"
#include "amp/numeric.h"
#include "amp/cuda.h"
#include "amp/autocast.h"
#include "amp/autograd.h"
#include "amp/ops.h"
#include "amp/optim.h"
#include "amp/scaler.h"
#include "amp/policy.h"
#include "amp/nn.h"
#include "amp/initialize.h"
#include "amp/io.h"
#include "amp/checkpoint.h"
#include "amp/gguf.h"
#include "amp/text.h"
#include "amp/quant.h"
#include "amp/gpt.h"
#include "amp/pretrained.h"
#include "amp/bert.h"
#include "amp/llama.h"
#include "amp/dist.h"

#endif
