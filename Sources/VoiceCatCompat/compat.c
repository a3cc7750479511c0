/*
 * Entry points for programs built against the header of release 0.2 (symbol version
 * VOICECAT_0), for the functions whose structs later releases appended fields to (the
 * ABI policy of include/voicecat.h). Each one takes or fills the 0.2 layout: an input
 * is copied field by field into a struct from the current *_default() (the fields 0.2
 * did not have keep their defaults; an old program's padding is never read), an output
 * is produced in the current layout and copied back field by field, with the 0.2 stride.
 *
 * The libvoicecat.so build (make lib, -DVOICECAT_SYMVER) binds them to the old
 * versions with .symver; other builds (tests) compile them as plain local functions.
 * They are named vcabi_* so the version script's vc_* wildcard does not export them.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "../../include/voicecat.h"

#ifdef VOICECAT_SYMVER
#define VERSION_0(local, name) __asm__(".symver " #local ", " #name "@VOICECAT_0");
#else
#define VERSION_0(local, name)
#endif

/* The field lists of release 0.2 (tools/abi-baseline.json). The current structs keep
 * these fields at the same offsets (checked below and by tools/check_abi.py). */
typedef struct vc_client_config_0_2 {
    const char *client_name;
    uint32_t keepalive_ms;
    uint32_t max_remote_streams;
    uint32_t event_queue_size;
    int32_t external_playback;
    const char *playback_device;
    uint32_t talk_hangover_ms;
    const char *known_servers_path;
    int32_t auto_reconnect;
} vc_client_config_0_2;

typedef struct vc_stream_desc_0_2 {
    vc_stream_kind kind;
    int32_t external_feed;
    const char *device;
    uint32_t channels;
    uint32_t max_queue_ms;
} vc_stream_desc_0_2;

typedef struct vc_remote_stream_info_0_2 {
    uint32_t ssrc;
    uint32_t user_id;
    uint32_t stream_id;
    vc_stream_kind kind;
    uint32_t channels;
    int32_t talking;
    vc_remote_stream settings;
    char username[65];
} vc_remote_stream_info_0_2;

typedef struct vc_device_info_0_2 {
    char name[128];
    char description[256];
} vc_device_info_0_2;

/* The bytes from the first field to the end of the last field of a 0.2 struct: what is
 * copied (the same offsets in both layouts), padding left out. */
#define FIELDS_0_2(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))
#define SAME_PREFIX(type, last) \
    _Static_assert(offsetof(type##_0_2, last) == offsetof(type, last), #type " keeps the 0.2 offsets")
SAME_PREFIX(vc_client_config, auto_reconnect);
SAME_PREFIX(vc_client_config, known_servers_path);
SAME_PREFIX(vc_client_config, playback_device);
SAME_PREFIX(vc_stream_desc, max_queue_ms);
SAME_PREFIX(vc_stream_desc, device);
SAME_PREFIX(vc_remote_stream_info, username);
SAME_PREFIX(vc_remote_stream_info, settings);
SAME_PREFIX(vc_device_info, description);

/* ---- vc_client_config ---------------------------------------------------------- */

vc_client_config_0_2 vcabi_client_config_default_0_2(void) {
    vc_client_config now = vc_client_config_default();
    vc_client_config_0_2 old;
    memset(&old, 0, sizeof old);
    memcpy(&old, &now, FIELDS_0_2(vc_client_config_0_2, auto_reconnect));
    return old;
}
VERSION_0(vcabi_client_config_default_0_2, vc_client_config_default)

int vcabi_client_create_0_2(const vc_client_config_0_2 *cfg, vc_client **out) {
    if (!cfg) return vc_client_create(NULL, out);
    vc_client_config now = vc_client_config_default();
    memcpy(&now, cfg, FIELDS_0_2(vc_client_config_0_2, auto_reconnect));
    return vc_client_create(&now, out);
}
VERSION_0(vcabi_client_create_0_2, vc_client_create)

/* ---- vc_stream_desc ------------------------------------------------------------ */

vc_stream_desc_0_2 vcabi_stream_desc_default_0_2(void) {
    vc_stream_desc now = vc_stream_desc_default();
    vc_stream_desc_0_2 old;
    memset(&old, 0, sizeof old);
    memcpy(&old, &now, FIELDS_0_2(vc_stream_desc_0_2, max_queue_ms));
    return old;
}
VERSION_0(vcabi_stream_desc_default_0_2, vc_stream_desc_default)

int vcabi_stream_start_0_2(vc_client *c, const vc_stream_desc_0_2 *d, uint32_t *out_stream_id) {
    if (!d) return vc_stream_start(c, NULL, out_stream_id);
    vc_stream_desc now = vc_stream_desc_default();
    memcpy(&now, d, FIELDS_0_2(vc_stream_desc_0_2, max_queue_ms));
    return vc_stream_start(c, &now, out_stream_id);
}
VERSION_0(vcabi_stream_start_0_2, vc_stream_start)

/* ---- lists: the current entries, copied out with the 0.2 stride ------------------ */

int vcabi_list_remote_streams_0_2(vc_client *c, vc_remote_stream_info_0_2 *out, size_t cap, size_t *count) {
    if (cap == 0 || !out) return vc_list_remote_streams(c, NULL, cap, count);
    vc_remote_stream_info *now = calloc(cap, sizeof *now);
    if (!now) return VC_ERR_NO_MEMORY;
    int rc = vc_list_remote_streams(c, now, cap, count);
    if (rc == VC_OK) {
        size_t n = *count < cap ? *count : cap;
        for (size_t i = 0; i < n; i++) memcpy(&out[i], &now[i], FIELDS_0_2(vc_remote_stream_info_0_2, username));
    }
    free(now);
    return rc;
}
VERSION_0(vcabi_list_remote_streams_0_2, vc_list_remote_streams)

int vcabi_list_devices_0_2(vc_device_kind kind, vc_device_info_0_2 *out, size_t cap, size_t *count) {
    if (cap == 0 || !out) return vc_list_devices(kind, NULL, cap, count);
    vc_device_info *now = calloc(cap, sizeof *now);
    if (!now) return VC_ERR_NO_MEMORY;
    int rc = vc_list_devices(kind, now, cap, count);
    if (rc == VC_OK) {
        size_t n = *count < cap ? *count : cap;
        for (size_t i = 0; i < n; i++) memcpy(&out[i], &now[i], FIELDS_0_2(vc_device_info_0_2, description));
    }
    free(now);
    return rc;
}
VERSION_0(vcabi_list_devices_0_2, vc_list_devices)
