/* docs/architecture.md's table of ops by dtype and backend is generated from the op table
 * (src/op_table.h): this test builds it and fails when the docs' copy, between the markers
 * "<!-- op-dtype-table -->" and "<!-- /op-dtype-table -->", differs, printing the table to paste.
 * Run with --write to rewrite the docs' copy in place. Every op of the table runs on both backends
 * (test_ops_cpu and test_ops_cuda hold it), in the dtypes its entry declares. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_table.h"
#include "test_util.h"

#define DOCS CG_TEST_DATA_DIR "/../../docs/architecture.md"
#define BEGIN "<!-- op-dtype-table -->\n"
#define END "<!-- /op-dtype-table -->"

static const cg_dtype kColumns[] = {CG_FLOAT32, CG_BFLOAT16, CG_FLOAT16, CG_INT64, CG_BOOL};
enum { NCOLUMNS = sizeof kColumns / sizeof kColumns[0] };

/* The table as markdown, one row per public name (entries sharing a name, such as the forms with and
 * without a bias, give the union of their dtypes); internal passes (names without "cg_") left out. */
static char *generate(void) {
    size_t cap = 1 << 16, at = 0;
    char *md = cg_test_malloc(cap);
    at += (size_t)snprintf(md + at, cap - at, "| op | cpu | cuda |\n|---|---|---|\n");
    for (int i = 0; i < cg__op_count(); i++) {
        const cg_op_info *op = cg__op_at(i);
        if (strncmp(op->name, "cg_", 3) != 0) continue;
        bool seen = false;
        unsigned dtypes = 0;
        for (int j = 0; j < cg__op_count(); j++)
            if (strcmp(cg__op_at(j)->name, op->name) == 0) {
                seen = seen || j < i;
                dtypes |= cg__op_at(j)->dtypes;
            }
        if (seen) continue;
        char cell[128] = "";
        for (int c = 0; c < NCOLUMNS; c++)
            if (dtypes >> kColumns[c] & 1u)
                snprintf(cell + strlen(cell), sizeof cell - strlen(cell), "%s%s", cell[0] ? ", " : "",
                         cg_dtype_name(kColumns[c]));
        at += (size_t)snprintf(md + at, cap - at, "| `%s` | %s | %s |\n", op->name, cell, cell);
        assert_true(at < cap);
    }
    return md;
}

static bool write_mode;

static void test_docs_table_is_current(void **state) {
    (void)state;
    char *docs = cg_test_read_file(DOCS), *table = generate();
    char *begin = strstr(docs, BEGIN), *end = begin ? strstr(begin, END) : NULL;
    if (!begin || !end) fail_msg("%s has no table between %s and %s", DOCS, "<!-- op-dtype-table -->", END);
    begin += strlen(BEGIN);
    if (write_mode) {
        FILE *f = fopen(DOCS, "wb");
        assert_non_null(f);
        fprintf(f, "%.*s%s%s", (int)(begin - docs), docs, table, end);
        fclose(f);
    } else if ((size_t)(end - begin) != strlen(table) || strncmp(begin, table, strlen(table)) != 0) {
        fail_msg("the op table changed: docs/architecture.md's copy is out of date. Run test_op_docs --write, or "
                 "paste:\n%s", table);
    }
    free(docs), free(table);
}

int main(int argc, char **argv) {
    write_mode = argc > 1 && strcmp(argv[1], "--write") == 0;
    cg_test_init();
    const struct CMUnitTest tests[] = {CG_TEST(test_docs_table_is_current)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
