/* The reference side of `pack_bench --paired`: the pack and unpack of
   ../shared/reference-bench for one of its eight types, as a shared object
   that pack_bench loads beside mpx so both run on the same buffers in one
   process, alternately.

   Built two ways (scripts/pack_compare.py --paired does both):
     gcc -O3 -shared -fPIC -DMANUAL -I../shared/reference-bench  -> the hand-written loops
                                                                     of manual_bench.c, verbatim
     mpicc.{mpich,openmpi} -O2 -shared -fPIC                       -> MPI_Pack / MPI_Unpack of the
                                                                     types pack_bench.c builds

   ref_prepare(name) selects a type and returns its packed size (0 if the name is
   unknown); ref_pack and ref_unpack then move `bytes` bytes between memory laid
   out for that type and a packed buffer. */
#include <stddef.h>
#include <string.h>

size_t ref_prepare(const char *name);
void ref_pack(const char *mem, char *packed, size_t bytes);
void ref_unpack(const char *packed, size_t bytes, char *mem);

/* pack_bench.c's irregular indexed type: 64k blocks from a 32-bit LCG. */
static int irregular_lens[65536], irregular_disps[65536];
static size_t irregular_bytes(void) {
  int off = 0; unsigned s = 12345; size_t bytes = 0;
  for (int i = 0; i < 65536; i++) {
    s = s * 1103515245 + 12345;
    irregular_lens[i] = 1 + (s >> 16) % 7; irregular_disps[i] = off;
    off += irregular_lens[i] + 1 + (s >> 8) % 5; bytes += irregular_lens[i] * 8;
  }
  return bytes;
}

#ifdef MANUAL
#define main manual_bench_main
#include "manual_bench.c"
#undef main

static kernel current;

size_t ref_prepare(const char *name) {
  static const struct { const char *name; kernel k; size_t bytes; } table[] = {
    {"contiguous_1M_double", k_contig, (size_t)N * 8},
    {"vector_stride2_double", k_stride2, (size_t)N * 8},
    {"vector_block8_stride16_double", k_block8, (size_t)N * 8},
    {"vector_xyz_of_xyzw_float", k_xyz, (size_t)N / 4 * 12},
    {"struct_int_double_char3_x1M", k_struct, (size_t)N / 2 * 15},
    {"subarray_128cube_xface_double", k_xface, 128 * 128 * 8},
    {"subarray_128cube_yface_double", k_yface, 128 * 128 * 8},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (!strcmp(name, table[i].name)) { current = table[i].k; return table[i].bytes; }
  if (!strcmp(name, "indexed_irregular_64k_blocks")) {
    size_t bytes = irregular_bytes();
    ix_n = 65536; ix_bl = irregular_lens; ix_dp = irregular_disps; current = k_indexed;
    return bytes;
  }
  return 0;
}
void ref_pack(const char *mem, char *packed, size_t bytes) { (void)bytes; current((char *)mem, packed, 0); }
void ref_unpack(const char *packed, size_t bytes, char *mem) { (void)bytes; current(mem, (char *)packed, 1); }

#else
#include <mpi.h>

static MPI_Datatype current = MPI_DATATYPE_NULL;
static int current_count;

size_t ref_prepare(const char *name) {
  int initialized; MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(NULL, NULL);
  if (current != MPI_DATATYPE_NULL) MPI_Type_free(&current);
  const int N = 1 << 20;
  MPI_Datatype t = MPI_DATATYPE_NULL; int count = 1;
  if (!strcmp(name, "contiguous_1M_double")) MPI_Type_contiguous(N, MPI_DOUBLE, &t);
  else if (!strcmp(name, "vector_stride2_double")) MPI_Type_vector(N, 1, 2, MPI_DOUBLE, &t);
  else if (!strcmp(name, "vector_block8_stride16_double")) MPI_Type_vector(N / 8, 8, 16, MPI_DOUBLE, &t);
  else if (!strcmp(name, "vector_xyz_of_xyzw_float")) MPI_Type_vector(N / 4, 3, 4, MPI_FLOAT, &t);
  else if (!strcmp(name, "struct_int_double_char3_x1M")) {
    int bl[3] = {1, 1, 3}; MPI_Aint d[3] = {0, 8, 16}; MPI_Datatype ty[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR}, s;
    MPI_Type_create_struct(3, bl, d, ty, &s); MPI_Type_create_resized(s, 0, 24, &t); MPI_Type_free(&s);
    count = N / 2;
  } else if (!strcmp(name, "subarray_128cube_xface_double")) {
    int sizes[3] = {128, 128, 128}, subs[3] = {128, 128, 1}, starts[3] = {0, 0, 5};
    MPI_Type_create_subarray(3, sizes, subs, starts, MPI_ORDER_C, MPI_DOUBLE, &t);
  } else if (!strcmp(name, "subarray_128cube_yface_double")) {
    int sizes[3] = {128, 128, 128}, subs[3] = {128, 1, 128}, starts[3] = {0, 5, 0};
    MPI_Type_create_subarray(3, sizes, subs, starts, MPI_ORDER_C, MPI_DOUBLE, &t);
  } else if (!strcmp(name, "indexed_irregular_64k_blocks")) {
    irregular_bytes();
    MPI_Type_indexed(65536, irregular_lens, irregular_disps, MPI_DOUBLE, &t);
  } else return 0;
  MPI_Type_commit(&t);
  int size; MPI_Type_size(t, &size);
  current = t; current_count = count;
  return (size_t)size * count;
}
void ref_pack(const char *mem, char *packed, size_t bytes) {
  int pos = 0; MPI_Pack(mem, current_count, current, packed, (int)bytes, &pos, MPI_COMM_WORLD);
}
void ref_unpack(const char *packed, size_t bytes, char *mem) {
  int pos = 0; MPI_Unpack(packed, (int)bytes, &pos, mem, current_count, current, MPI_COMM_WORLD);
}
#endif
