/* eu_write_png_grid: the grid is drawn on the host in bytes, then written row by row with libpng. */
#include "png_grid.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tile's value v in [-1, 1] as a byte: round(255 (v + 1) / 2), clamped (NaN gives 0). */
static png_byte to_byte(float v) {
    float u = (v + 1.0f) * 0.5f;
    if (!(u > 0.0f)) return 0;
    if (u >= 1.0f) return 255;
    return (png_byte)(u * 255.0f + 0.5f);
}

/* Writes the rows of a width x height image of `channels` bytes a pixel; CG_OK or CG_ERR_IO. */
static cg_status write_png(const char *path, const png_byte *pixels, int64_t width, int64_t height, int channels) {
    FILE *f = fopen(path, "wb");
    if (!f) return cg_set_error(CG_ERR_IO, "eu_write_png_grid: cannot open %s for writing", path);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    /* libpng reports its errors by longjmp to here; nothing below changes a local after setjmp. */
    if (!info || setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return cg_set_error(CG_ERR_IO, "eu_write_png_grid: libpng could not write %s", path);
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8,
                 channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int64_t y = 0; y < height; y++) png_write_row(png, pixels + y * width * channels);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    if (fclose(f) != 0) return cg_set_error(CG_ERR_IO, "eu_write_png_grid: writing %s failed", path);
    return CG_OK;
}

cg_status eu_write_png_grid(const cg_tensor *images, int nrow, int padding, const char *path) {
    if (!images || !path) return cg_set_error(CG_ERR_INVALID_ARG, "eu_write_png_grid: images and path must not be NULL");
    int ndim = cg_ndim(images);
    int64_t n = ndim == 4 ? cg_size(images, 0) : 0, c = ndim == 4 ? cg_size(images, 1) : 0;
    int64_t h = ndim == 4 ? cg_size(images, 2) : 0, w = ndim == 4 ? cg_size(images, 3) : 0;
    if (n < 1 || (c != 1 && c != 3) || h < 1 || w < 1 || cg_dtype_of(images) != CG_FLOAT32)
        return cg_set_error(CG_ERR_INVALID_ARG,
                            "eu_write_png_grid: images must be float32 (N, C, H, W), N, H, W >= 1, C 1 or 3; got %d dims "
                            "(%lld, %lld, %lld, %lld)",
                            ndim, (long long)n, (long long)c, (long long)h, (long long)w);
    if (nrow < 1 || padding < 0 || padding > 1024)
        return cg_set_error(CG_ERR_INVALID_ARG, "eu_write_png_grid: nrow %d must be >= 1, padding %d in [0, 1024]", nrow,
                            padding);
    int64_t cols = n < nrow ? n : nrow, rows = (n + cols - 1) / cols;
    int64_t width = cols * (w + padding) + padding, height = rows * (h + padding) + padding;
    /* PNG's limit is 2^31 - 1 a side; keeping the whole image below 2^31 bytes also keeps the sizes below
     * from overflowing. */
    if (width > (1 << 20) || height > (1 << 20) || width * height > (INT64_C(1) << 31) / 3)
        return cg_set_error(CG_ERR_INVALID_ARG, "eu_write_png_grid: a %lld x %lld grid is too large",
                            (long long)width, (long long)height);
    size_t values = (size_t)(n * c * h * w);
    float *host = malloc(values * sizeof *host);
    png_byte *pixels = calloc((size_t)(width * height * c), 1); /* black padding */
    cg_status s = host && pixels ? cg_to_host(images, host, values)
                                 : cg_set_error(CG_ERR_OOM, "eu_write_png_grid: no host memory for the grid");
    for (int64_t i = 0; s == CG_OK && i < n; i++) {
        int64_t top = (i / cols) * (h + padding) + padding, left = (i % cols) * (w + padding) + padding;
        for (int64_t k = 0; k < c; k++)
            for (int64_t y = 0; y < h; y++)
                for (int64_t x = 0; x < w; x++)
                    pixels[((top + y) * width + left + x) * c + k] = to_byte(host[((i * c + k) * h + y) * w + x]);
    }
    if (s == CG_OK) s = write_png(path, pixels, width, height, (int)c);
    free(host);
    free(pixels);
    return s;
}
