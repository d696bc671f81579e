/*
 * replay_main.c - the plain-program driver of the fuzz targets: linked with one of
 * fuzz_proto.c, fuzz_ckpt_shard.c or fuzz_ckpt_manifest.c instead of libFuzzer, it feeds every
 * file of the corpus directories given on the command line (the first 1 MiB of each) to
 * LLVMFuzzerTestOneInput, so every input a fuzzing run kept stays a regression test under ctest.
 * Exits 0 after at least one input, 1 when a directory cannot be opened or holds none.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    static uint8_t buf[1 << 20];
    int files = 0;
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "cannot open corpus directory %s\n", argv[i]);
            return 1;
        }
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], de->d_name);
            FILE *f = fopen(path, "rb");
            if (!f) continue;
            size_t n = fread(buf, 1, sizeof buf, f);
            fclose(f);
            LLVMFuzzerTestOneInput(buf, n);
            files++;
        }
        closedir(d);
    }
    printf("replayed %d corpus inputs\n", files);
    return files > 0 ? 0 : 1;
}
