/* Nothing to compile: the target only carries include/cfuzzer.h. */
#include "cfuzzer.h"
