#pragma once
// Everything in layers/: include this to build models.
#include "layers/basic.h"
#include "layers/containers.h"
#include "layers/conv.h"
#include "layers/gpt.h"
#include "layers/init.h"
#include "layers/module.h"
#include "layers/transformer.h"
