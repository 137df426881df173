// Package images stores the images of output rows by reference
// (output.images: reference): each data-URL image part's bytes are written
// once, content-addressed, to OUTPUT/images/HEX.EXT (HEX the SHA-256 of the
// bytes, EXT the media subtype), and the part's URL becomes "sha256:HEX".
// http(s) URLs stay as they are.
//
// A file is written to a temporary name, synced and renamed, before the
// rows that name it reach the Parquet sink, so that every committed row's
// reference resolves; a crash between the two leaves at most a file that
// no row names, which a resumed run writes again under the same name.
package images
