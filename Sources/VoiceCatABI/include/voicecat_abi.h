/* The public header's types (not its prototypes) for the Swift implementation.
 * The prototypes are left out so Swift does not see each vc_* function twice
 * (once from C, once as its own @_cdecl export). */
#define VC_TYPES_ONLY 1
#include "../../../include/voicecat.h"
