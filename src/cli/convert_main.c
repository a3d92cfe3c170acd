/* feather-convert: converts fp16/bf16 safetensors checkpoints to prepacked fp8. */
#include "cli/common.h"

#include <string.h>

int main(int argc, char **argv) {
    cli_prog = "feather-convert";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version")) { cli_print_version(); return 0; }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("Usage: feather-convert [options] INPUT... [-o OUTPUT]\n");
            return 0;
        }
    }
    return cli_usage_error("not implemented yet");
}
