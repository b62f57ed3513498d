/* A grid of images as one PNG file (libpng), as torchvision.utils.save_image lays them out: for the
 * examples that write samples (dcgan). Kept out of example_util so that only those link libpng. */
#ifndef CGRAD_PNG_GRID_H
#define CGRAD_PNG_GRID_H

#include "cgrad.h"

/* Writes images (N, C, H, W) float32, C 1 (grey) or 3 (RGB), any device, values in [-1, 1] (a Tanh's
 * output, Normalize((0.5,), (0.5,))'s images), as an 8-bit PNG at path: tiles of nrow images a row,
 * `padding` black pixels around and between them (make_grid(padding=2)'s layout), each value mapped
 * to round(255 (v + 1) / 2), clamped to [0, 255] (save_image(normalize=True, value_range=(-1, 1))).
 * CG_ERR_INVALID_ARG for a bad shape, dtype or nrow; CG_ERR_IO when the file cannot be written. */
cg_status eu_write_png_grid(const cg_tensor *images, int nrow, int padding, const char *path);

#endif
