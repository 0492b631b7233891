#include "worker/executor/init_io.h"

#include <cmath>
#include <cstring>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/box.h"
#include "common/dtype.h"
#include "common/philox.h"
#include "common/safetensors.h"
#include "common/status.h"

namespace weft {
namespace {

// A buffer that holds the box of a global tensor: id in range, box inside the shape, the box's
// volume equal to the buffer's size.
absl::Status CheckBoxedBuffer(const Buffers& buffers, int buffer,
                              const google::protobuf::RepeatedField<int64_t>& global_shape,
                              const v1::TensorBox& box) {
  if (buffer < 0 || buffer >= buffers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("buffer id ", buffer, " out of range"));
  }
  const std::vector<int64_t> global(global_shape.begin(), global_shape.end());
  const std::vector<int64_t> offsets(box.offsets().begin(), box.offsets().end());
  const std::vector<int64_t> lengths(box.lengths().begin(), box.lengths().end());
  if (offsets.size() != global.size() || lengths.size() != global.size()) {
    return absl::InvalidArgumentError(absl::StrCat("box offsets ", Dims(offsets), " lengths ",
                                                   Dims(lengths), " do not match global shape ",
                                                   Dims(global)));
  }
  for (size_t d = 0; d < global.size(); ++d) {
    if (offsets[d] < 0 || lengths[d] < 0 || offsets[d] + lengths[d] > global[d]) {
      return absl::InvalidArgumentError(absl::StrCat("box offsets ", Dims(offsets), " lengths ",
                                                     Dims(lengths), " fall outside global shape ",
                                                     Dims(global)));
    }
  }
  if (Product(lengths) != buffers.numel(buffer)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "box lengths ", Dims(lengths), " hold ", Product(lengths), " elements, buffer shape ",
        Dims(buffers.shape(buffer)), " holds ", buffers.numel(buffer)));
  }
  return absl::OkStatus();
}

// Reads Program.load_checkpoint into the buffers of its items; returns the buffers filled.
absl::StatusOr<std::set<int>> LoadCheckpoint(const v1::Program& program, const Buffers& buffers,
                                             Kernels& kernels) {
  std::set<int> loaded;
  const std::string& folder = program.load_checkpoint();
  if (folder.empty()) return loaded;
  absl::StatusOr<checkpoint::CheckpointReader> reader = checkpoint::CheckpointReader::Open(folder);
  if (!reader.ok()) return Annotate(reader.status(), absl::StrCat("loading checkpoint ", folder));
  std::vector<char> host;  // one box, in its buffer's dtype
  for (const v1::CheckpointItem& item : program.checkpoint_items()) {
    if (item.role() == v1::Buffer::OPTIMIZER_STATE && !program.load_optimizer_states()) continue;
    const int b = item.buffer();
    const std::vector<int64_t> offsets(item.box().offsets().begin(), item.box().offsets().end());
    const std::vector<int64_t> lengths(item.box().lengths().begin(), item.box().lengths().end());
    host.resize(static_cast<size_t>(buffers.bytes(b)));
    RETURN_IF_ERROR(Annotate(
        reader->ReadBox(item.name(), offsets, lengths, buffers.dtype(b), host.data()),
        absl::StrCat("loading ", item.name(), " box offsets ", Dims(offsets), " lengths ",
                     Dims(lengths), " from ", folder)));
    kernels.CopyFromHost(host.data(), buffers.data(b), buffers.bytes(b));
    loaded.insert(b);
  }
  return loaded;
}

absl::Status RunInit(const v1::Program& program, const Buffers& buffers, Kernels& kernels,
                     const v1::ParamInit& init, const SafetensorsFile* file) {
  const int b = init.buffer();
  const int64_t n = buffers.numel(b);
  if (init.kind() == v1::ParamInit::ZEROS || init.kind() == v1::ParamInit::ONES) {
    kernels.Fill(buffers.data(b), n, buffers.dtype(b),
                 init.kind() == v1::ParamInit::ONES ? 1.0 : 0.0);
    return absl::OkStatus();
  }
  const std::vector<int64_t> global(init.global_shape().begin(), init.global_shape().end());
  const std::vector<int64_t> offsets(init.box().offsets().begin(), init.box().offsets().end());
  const std::vector<int64_t> lengths(init.box().lengths().begin(), init.box().lengths().end());
  std::vector<char> bytes(static_cast<size_t>(buffers.bytes(b)));  // in the buffer's dtype
  if (init.kind() == v1::ParamInit::UNIFORM) {
    // Each element of the box draws at its index in the global tensor.
    std::vector<float> host(static_cast<size_t>(n));
    ForEachBoxRun(global, offsets, lengths, [&](int64_t src, int64_t dst, int64_t count) {
      for (int64_t j = 0; j < count; ++j) {
        host[dst + j] = PhiloxUniform(program.seed(), init.tensor_key(),
                                      static_cast<uint64_t>(src + j), init.bound());
      }
    });
    ConvertElements(host.data(), v1::F32, bytes.data(), buffers.dtype(b), n);
  } else {
    const std::string context =
        absl::StrCat("loading ", init.name(), " from ", program.init_from());
    const std::optional<std::string> stored_name = file->ParameterName(init.name());
    if (!stored_name) return absl::NotFoundError(absl::StrCat(context, ": no such tensor"));
    const SafetensorsFile::Entry* e = file->Find(*stored_name);
    const std::vector<int64_t> file_shape(init.file_shape().begin(), init.file_shape().end());
    if (e->shape != global && e->shape != file_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, ": shape ", Dims(e->shape), " in the file, the model needs ",
          Dims(file_shape.empty() ? global : file_shape)));
    }
    // In the buffer's dtype: a float tensor of the other float dtype converts on read. The box
    // is in the model's shape, the file's tensor is seen in it.
    RETURN_IF_ERROR(Annotate(file->ReadBox(*stored_name, offsets, lengths, buffers.dtype(b),
                                           bytes.data(), global),
                             context));
  }
  kernels.CopyFromHost(bytes.data(), buffers.data(b), buffers.bytes(b));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckInit(const v1::Program& program, const Buffers& buffers,
                       const v1::ParamInit& init) {
  RETURN_IF_ERROR(CheckBoxedBuffer(buffers, init.buffer(), init.global_shape(), init.box()));
  switch (init.kind()) {
    case v1::ParamInit::UNIFORM:
    case v1::ParamInit::ZEROS:
    case v1::ParamInit::ONES:
      return absl::OkStatus();
    case v1::ParamInit::FROM_FILE:
      if (program.init_from().empty()) {
        return absl::InvalidArgumentError("FROM_FILE but the program has no init_from file");
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown init kind ", v1::ParamInit::Kind_Name(init.kind())));
  }
}

absl::Status CheckCheckpointItem(const Buffers& buffers, const v1::CheckpointItem& item) {
  RETURN_IF_ERROR(CheckBoxedBuffer(buffers, item.buffer(), item.global_shape(), item.box()));
  if (item.role() != v1::Buffer::PARAM && item.role() != v1::Buffer::OPTIMIZER_STATE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "role ", v1::Buffer::Role_Name(item.role()), "; expected PARAM or OPTIMIZER_STATE"));
  }
  return absl::OkStatus();
}

absl::Status LoadInitialValues(const v1::Program& program, const Buffers& buffers,
                               Kernels& kernels) {
  // Buffers a checkpoint covers skip their ParamInit (init_from may then name a folder).
  ASSIGN_OR_RETURN(const std::set<int> loaded, LoadCheckpoint(program, buffers, kernels));
  std::unique_ptr<SafetensorsFile> file;
  for (const v1::ParamInit& init : program.init()) {
    if (loaded.count(init.buffer()) > 0) continue;
    if (init.kind() == v1::ParamInit::FROM_FILE && file == nullptr) {
      absl::StatusOr<SafetensorsFile> opened = SafetensorsFile::Open(program.init_from());
      if (!opened.ok()) {
        return Annotate(opened.status(),
                        absl::StrCat("loading '", init.name(), "' from ", program.init_from()));
      }
      file = std::make_unique<SafetensorsFile>(*std::move(opened));
    }
    RETURN_IF_ERROR(RunInit(program, buffers, kernels, init, file.get()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<checkpoint::IndexedChunk>> SaveCheckpointShard(
    const v1::Program& program, const Buffers& buffers, Kernels& kernels, int64_t step) {
  std::vector<std::vector<char>> host;  // each buffer's box, in its dtype
  for (const v1::CheckpointItem& item : program.checkpoint_items()) {
    if (!item.write()) continue;
    host.emplace_back(static_cast<size_t>(buffers.bytes(item.buffer())));
    kernels.CopyToHost(buffers.data(item.buffer()), host.back().data(),
                       buffers.bytes(item.buffer()));
  }
  RETURN_IF_ERROR(kernels.Synchronize());
  std::vector<checkpoint::ShardPiece> pieces;
  size_t next = 0;
  for (const v1::CheckpointItem& item : program.checkpoint_items()) {
    if (!item.write()) continue;
    checkpoint::ShardPiece piece;
    piece.name = item.name();
    piece.global_shape.assign(item.global_shape().begin(), item.global_shape().end());
    piece.offsets.assign(item.box().offsets().begin(), item.box().offsets().end());
    piece.lengths.assign(item.box().lengths().begin(), item.box().lengths().end());
    piece.data = host[next++].data();
    piece.dtype = buffers.dtype(item.buffer());
    // A diverged update (the loss is computed before it) must not become a checkpoint to resume.
    if (piece.dtype == v1::F32 || piece.dtype == v1::BF16) {
      const int64_t n = buffers.numel(item.buffer());
      const char* bytes = static_cast<const char*>(piece.data);
      for (int64_t i = 0; i < n; ++i) {
        float v;
        if (piece.dtype == v1::F32) {
          std::memcpy(&v, bytes + i * sizeof(float), sizeof(v));
        } else {
          uint16_t bits;
          std::memcpy(&bits, bytes + i * sizeof(bits), sizeof(bits));
          v = Bf16BitsToFloat(bits);
        }
        if (std::isfinite(v)) continue;
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint of step ", step, ": ", item.name(), " holds a non-finite value (", v,
            " at element ", i, " of this rank's piece); not saved"));
      }
    }
    pieces.push_back(std::move(piece));
  }
  if (pieces.empty()) return std::vector<checkpoint::IndexedChunk>();
  const std::string staging = checkpoint::StagingDir(program.checkpoint_dir(), step);
  absl::StatusOr<std::vector<checkpoint::IndexedChunk>> chunks =
      checkpoint::WriteShard(staging, program.rank(), pieces);
  if (!chunks.ok()) {
    return Annotate(chunks.status(), absl::StrCat("saving step ", step, " into ", staging));
  }
  return chunks;
}

}  // namespace weft
