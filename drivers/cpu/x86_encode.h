// An x86-64 assembler for generated code: a list of instructions in Intel's operand order (destination first) becomes
// machine code, with labels resolved. It picks the encoding an assembler would: legacy/REX for general-purpose
// instructions, VEX for AVX when every register is below 16 and nothing needs AVX-512 (no zmm, no write mask), EVEX
// otherwise. What each mnemonic accepts is a table of forms (x86_opcodes.cpp); this file's code only interprets it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

namespace th::x86 {

enum class RegClass : uint8_t { None, Gpr8, Gpr16, Gpr32, Gpr64, Rip, Xmm, Ymm, Zmm, K };

// A register: its class and number (0-15 for general-purpose registers, 0-31 for vectors, 0-7 for masks). The 8-bit
// registers are al, cl, dl, bl, spl, bpl, sil, dil, r8b..r15b (ah..bh, which cannot meet a REX prefix, are not offered).
struct Reg {
  RegClass cls = RegClass::None;
  uint8_t num = 0;
  friend constexpr bool operator==(Reg, Reg) = default;
};

constexpr Reg gpr64(int n) { return {RegClass::Gpr64, static_cast<uint8_t>(n)}; }
constexpr Reg gpr32(int n) { return {RegClass::Gpr32, static_cast<uint8_t>(n)}; }
constexpr Reg gpr16(int n) { return {RegClass::Gpr16, static_cast<uint8_t>(n)}; }
constexpr Reg gpr8(int n) { return {RegClass::Gpr8, static_cast<uint8_t>(n)}; }
constexpr Reg xmm(int n) { return {RegClass::Xmm, static_cast<uint8_t>(n)}; }
constexpr Reg ymm(int n) { return {RegClass::Ymm, static_cast<uint8_t>(n)}; }
constexpr Reg zmm(int n) { return {RegClass::Zmm, static_cast<uint8_t>(n)}; }
constexpr Reg kreg(int n) { return {RegClass::K, static_cast<uint8_t>(n)}; }
inline constexpr Reg rip{RegClass::Rip, 0};
inline constexpr Reg rax = gpr64(0), rcx = gpr64(1), rdx = gpr64(2), rbx = gpr64(3), rsp = gpr64(4), rbp = gpr64(5),
                     rsi = gpr64(6), rdi = gpr64(7), r8 = gpr64(8), r9 = gpr64(9), r10 = gpr64(10), r11 = gpr64(11),
                     r12 = gpr64(12), r13 = gpr64(13), r14 = gpr64(14), r15 = gpr64(15);

// "rax", "r8d", "sil", "xmm17", "k3", "rip" (case-insensitive); nullopt for anything else.
std::optional<Reg> parse_reg(std::string_view name);
// The lower-case name; "?" for a register that does not exist (a number out of range).
std::string reg_name(Reg r);

// A memory operand: [base + index*scale + disp], size_bytes wide (0: unsized, which only lea-like forms take). base is a
// 64-bit register, rip, or none; index a 64-bit register other than rsp, or none. With base rip and a label, the
// address is the label's plus disp.
struct Mem {
  int size_bytes = 0;
  Reg base{};
  Reg index{};
  int scale = 1;
  int32_t disp = 0;
  std::string label;
};

struct Imm {
  int64_t value = 0;
};

// A jump or call target.
struct LabelRef {
  std::string name;
};

// An EVEX write mask on the destination: merging, or zeroing the masked-off elements. Written as the last operand.
struct Mask {
  Reg k;
  bool zeroing = false;
};

using Operand = std::variant<Reg, Mem, Imm, LabelRef, Mask>;

// One instruction, or a pseudo-instruction: "label" (ops: one LabelRef) defines a label here, "align" (ops: Imm n and
// optionally Imm fill) pads with the fill byte (int3 by default) to a multiple of n, "data" emits `data` as it is.
// A mnemonic may start with "lock " (a locked read-modify-write of memory).
struct Instr {
  std::string mnemonic;
  std::vector<Operand> ops;
  std::vector<uint8_t> data;

  static Instr label(std::string name) { return {"label", {LabelRef{std::move(name)}}, {}}; }
  static Instr align(int64_t n, uint8_t fill = 0xCC) { return {"align", {Imm{n}, Imm{fill}}, {}}; }
  static Instr bytes(std::vector<uint8_t> data) { return {"data", {}, std::move(data)}; }
};

struct Assembled {
  std::vector<uint8_t> code;
  std::unordered_map<std::string, size_t> labels;  // each label's offset in code
};

// Encodes the program. Jumps to labels take the 2-byte rel8 form wherever the final displacement fits and rel32
// elsewhere (grown to a fixed point); calls are always rel32. Throws std::invalid_argument naming the instruction (as
// text) for anything it cannot encode: an unknown mnemonic, operands no form takes, an undefined or repeated label.
Assembled assemble(std::span<const Instr> program);

// Every mnemonic assemble() knows (without the "lock " prefix and the pseudo-instructions), sorted.
std::vector<std::string_view> mnemonics();

// The instruction as Intel-syntax text, for messages: "vaddps zmm1, zmm2, zmmword ptr [rax + 0x40], {k1}{z}".
std::string to_string(const Instr& instr);

}  // namespace th::x86
