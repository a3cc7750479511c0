/*
 * abi_compat: a program built against release 0.2's header, emulated. It binds the
 * VOICECAT_0 versions of the functions whose structs grew in 0.3 (dlvsym, as the
 * dynamic linker does for a binary linked against 0.2) and passes them 0.2's layouts:
 * inputs followed by bytes a 0.2 program never wrote (0xff where 0.3's new fields
 * are), outputs with 0.2's stride and a guard after the last entry. The old entry
 * points must read and write exactly the old layout; the default versions (what
 * dlsym and a rebuilt program get) take the new one.
 *   abi_compat LIBRARY PORT
 * Prints "N passed, M failed" and exits non-zero on any failure.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <voicecat.h>

static int passed, failed;
#define CHECK(cond, what) do { if (cond) passed++; else { failed++; fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, what); } } while (0)

/* Release 0.2's layouts (tools/abi-baseline.json). */
typedef struct { const char *client_name; uint32_t keepalive_ms, max_remote_streams, event_queue_size; int32_t external_playback;
                 const char *playback_device; uint32_t talk_hangover_ms; const char *known_servers_path; int32_t auto_reconnect; } config_0_2;
typedef struct { vc_stream_kind kind; int32_t external_feed; const char *device; uint32_t channels, max_queue_ms; } desc_0_2;
typedef struct { uint32_t ssrc, user_id, stream_id; vc_stream_kind kind; uint32_t channels; int32_t talking; vc_remote_stream settings;
                 char username[65]; } info_0_2;
typedef struct { char name[128]; char description[256]; } device_0_2;

static void *old(void *lib, const char *name) {
    void *f = dlvsym(lib, name, "VOICECAT_0");
    if (!f) { fprintf(stderr, "FAIL: %s@VOICECAT_0 is missing\n", name); exit(1); }
    return f;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s LIBRARY PORT\n", argv[0]); return 2; }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    int port = atoi(argv[2]);
    config_0_2 (*config_default)(void) = (config_0_2 (*)(void))old(lib, "vc_client_config_default");
    int (*create)(const config_0_2 *, vc_client **) = (int (*)(const config_0_2 *, vc_client **))old(lib, "vc_client_create");
    desc_0_2 (*desc_default)(void) = (desc_0_2 (*)(void))old(lib, "vc_stream_desc_default");
    int (*start)(vc_client *, const desc_0_2 *, uint32_t *) = (int (*)(vc_client *, const desc_0_2 *, uint32_t *))old(lib, "vc_stream_start");
    int (*list_remote)(vc_client *, info_0_2 *, size_t, size_t *) = (int (*)(vc_client *, info_0_2 *, size_t, size_t *))old(lib, "vc_list_remote_streams");
    int (*list_devices)(vc_device_kind, device_0_2 *, size_t, size_t *) = (int (*)(vc_device_kind, device_0_2 *, size_t, size_t *))old(lib, "vc_list_devices");
    /* The current versions, through the header's prototypes (dlsym gives the default). */
    int (*now_create)(const vc_client_config *, vc_client **) = (int (*)(const vc_client_config *, vc_client **))dlsym(lib, "vc_client_create");
    vc_client_config (*now_default)(void) = (vc_client_config (*)(void))dlsym(lib, "vc_client_config_default");
    int (*set_alsa)(const char *) = (int (*)(const char *))dlsym(lib, "vc_set_alsa_config");
    int (*connect)(vc_client *, const vc_connect_params *) = (int (*)(vc_client *, const vc_connect_params *))dlsym(lib, "vc_connect");
    int (*join)(vc_client *, const char *) = (int (*)(vc_client *, const char *))dlsym(lib, "vc_join_channel");
    void (*destroy)(vc_client *) = (void (*)(vc_client *))dlsym(lib, "vc_client_destroy");
    CHECK(now_create && now_default && set_alsa && connect && join && destroy, "the default versions are there");
    CHECK((void *)now_create != (void *)create, "vc_client_create has two versions");

    /* Inputs: a 0.2 config followed by 0xff where 0.3 keeps resampler_quality (in former padding) and loss_report_ms. */
    unsigned char raw[sizeof(vc_client_config) + 64];
    memset(raw, 0xff, sizeof raw);
    config_0_2 cfg = config_default();
    CHECK(cfg.talk_hangover_ms == 300 && cfg.keepalive_ms == 5000 && cfg.max_remote_streams == 32, "0.2 defaults");
    cfg.external_playback = 1;
    cfg.known_servers_path = "";
    memcpy(raw, &cfg, offsetof(config_0_2, auto_reconnect) + sizeof cfg.auto_reconnect);
    vc_client *c = NULL;
    CHECK(create((const config_0_2 *)raw, &c) == VC_OK && c, "the old create ignores what 0.2 did not write");
    vc_client *d = NULL;
    CHECK(now_create((const vc_client_config *)raw, &d) == VC_ERR_INVALID_ARG, "the new create reads the new field (0xff...: refused)");
    vc_client_config fresh = now_default();
    CHECK(fresh.resampler_quality <= 10, "the new default fills the new field");

    vc_connect_params (*params_default)(void) = (vc_connect_params (*)(void))dlsym(lib, "vc_connect_params_default");
    vc_stream_desc (*now_desc_default)(void) = (vc_stream_desc (*)(void))dlsym(lib, "vc_stream_desc_default");
    CHECK(params_default && now_desc_default, "the default versions of the *_default functions are there");
    if (!params_default || !now_desc_default) return 1;
    vc_connect_params p = params_default();
    p.host = "127.0.0.1"; p.port = (uint16_t)port; p.username = "abi-0.2"; p.allow_unverified = 1;
    CHECK(connect(c, &p) == VC_OK, "connect");
    CHECK(join(c, "Lobby") == VC_OK, "join");

    /* A 0.2 stream description followed by 0xff where 0.3 keeps sample_rate. */
    unsigned char rawd[sizeof(vc_stream_desc) + 16];
    memset(rawd, 0xff, sizeof rawd);
    desc_0_2 desc = desc_default();
    CHECK(desc.kind == VC_STREAM_MIC && desc.external_feed == 1 && desc.channels == 1, "0.2 stream defaults");
    memcpy(rawd, &desc, offsetof(desc_0_2, max_queue_ms) + sizeof desc.max_queue_ms);
    uint32_t sid = 0;
    CHECK(start(c, (const desc_0_2 *)rawd, &sid) == VC_OK, "the old stream start reads 0.2's fields only (48 kHz)");

    /* Outputs with 0.2's stride: a second client's stream as a 0.2 vc_remote_stream_info. */
    vc_client *talker = NULL;
    vc_client_config tc = now_default();
    tc.external_playback = 1; tc.known_servers_path = "";
    CHECK(now_create(&tc, &talker) == VC_OK, "second client");
    p.username = "abi-talker";
    CHECK(connect(talker, &p) == VC_OK && join(talker, "Lobby") == VC_OK, "second client joins");
    vc_stream_desc td = now_desc_default();
    uint32_t tid;
    int (*now_start)(vc_client *, const vc_stream_desc *, uint32_t *) = (int (*)(vc_client *, const vc_stream_desc *, uint32_t *))dlsym(lib, "vc_stream_start");
    CHECK(now_start(talker, &td, &tid) == VC_OK, "second client publishes");
    struct { info_0_2 e[1]; unsigned char guard[32]; } infos;
    memset(&infos, 0xab, sizeof infos);
    size_t count = 0;
    for (int i = 0; i < 200 && count == 0; i++) {
        list_remote(c, infos.e, 1, &count);
        struct timespec t = {0, 10 * 1000000L};
        nanosleep(&t, NULL);
    }
    CHECK(count == 1 && strcmp(infos.e[0].username, "abi-talker") == 0 && infos.e[0].kind == VC_STREAM_MIC, "the old list fills 0.2 entries");
    int guard_ok = 1;
    for (size_t i = 0; i < sizeof infos.guard; i++) guard_ok &= infos.guard[i] == 0xab;
    CHECK(guard_ok, "and nothing past them");

    /* Devices: two PCMs of this process, listed with 0.2's stride, a guard after. */
    CHECK(set_alsa("pcm.abi_one { type null }\npcm.abi_two { type null }") == VC_OK, "alsa config");
    struct { device_0_2 e[2]; unsigned char guard[64]; } devs;
    memset(&devs, 0xab, sizeof devs);
    CHECK(list_devices(VC_DEVICE_PLAYBACK, devs.e, 2, &count) == VC_OK && count >= 2, "the old device list");
    CHECK(strcmp(devs.e[0].name, "abi_one") == 0 && strcmp(devs.e[1].name, "abi_two") == 0, "entries at 0.2's stride");
    guard_ok = 1;
    for (size_t i = 0; i < sizeof devs.guard; i++) guard_ok &= devs.guard[i] == 0xab;
    CHECK(guard_ok, "and nothing past them");
    CHECK(list_devices(VC_DEVICE_PLAYBACK, NULL, 4, &count) == VC_ERR_INVALID_ARG, "argument checks still apply");

    destroy(talker);
    destroy(c);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
