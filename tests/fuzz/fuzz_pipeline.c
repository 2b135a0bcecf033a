/* tests/fuzz/fuzz_pipeline.c - the pipeline file parser (src/config: YAML -> cfg tree ->
 * pipeline spec with its checks) on arbitrary bytes. */
#include "ferry/core.h"
#include "ferry/pipeline.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ferry_pipeline_spec *p = NULL;
    struct ferry_error err;
    if (ferry_pipeline_load_string((const char *)data, size, "fuzz.yaml", &p, &err) == 0) {
        char *route = p->n_resources > 0 ? ferry_pipeline_route(p, &p->resources[0]) : NULL;
        ferry_free(route);
        ferry_pipeline_free(p);
    }
    return 0;
}
