/* VoiceCatABI has no code of its own: it only exposes include/voicecat.h's types to Swift. */
#include "voicecat_abi.h"
