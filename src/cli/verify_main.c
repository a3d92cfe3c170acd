/* feather-verify: checks converted checkpoints and measures their error. */
#include "cli/common.h"

#include <string.h>

int main(int argc, char **argv) {
    cli_prog = "feather-verify";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version")) { cli_print_version(); return 0; }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("Usage: feather-verify [options] FILE...\n");
            return 0;
        }
    }
    return cli_usage_error("not implemented yet");
}
