// The assembler: matches each instruction against its forms in the table (x86_opcodes.cpp), encodes the candidates,
// keeps the shortest, then lays the program out and resolves labels. Bit layouts of REX, VEX, EVEX, ModRM and SIB follow
// the Intel SDM volume 2, chapter 2.
#include "drivers/cpu/x86_encode.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <limits>
#include <stdexcept>

#include "drivers/cpu/x86_opcodes.h"

namespace th::x86 {

namespace {

using namespace detail;

constexpr std::string_view kGpr64[] = {"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi"};
constexpr std::string_view kGpr32[] = {"eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"};
constexpr std::string_view kGpr16[] = {"ax", "cx", "dx", "bx", "sp", "bp", "si", "di"};
constexpr std::string_view kGpr8[] = {"al", "cl", "dl", "bl", "spl", "bpl", "sil", "dil"};

int reg_bits(RegClass c) {
  switch (c) {
    case RegClass::Gpr8: return 8;
    case RegClass::Gpr16: return 16;
    case RegClass::Gpr32: return 32;
    case RegClass::Gpr64: return 64;
    case RegClass::Xmm: return 128;
    case RegClass::Ymm: return 256;
    case RegClass::Zmm: return 512;
    default: return 0;
  }
}
bool is_gpr(RegClass c) { return c >= RegClass::Gpr8 && c <= RegClass::Gpr64; }
bool is_vec(RegClass c) { return c == RegClass::Xmm || c == RegClass::Ymm || c == RegClass::Zmm; }

bool reg_exists(Reg r) {
  if (is_gpr(r.cls)) return r.num < 16;
  if (is_vec(r.cls)) return r.num < 32;
  if (r.cls == RegClass::K) return r.num < 8;
  return r.cls == RegClass::Rip && r.num == 0;
}

std::string hex(int64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  std::string s;
  do s.insert(s.begin(), digits[u & 15]); while (u >>= 4);
  return (v < 0 ? "-0x" : "0x") + s;
}

std::string mem_text(const Mem& m) {
  std::string s;
  switch (m.size_bytes) {
    case 0: break;
    case 1: s = "byte ptr "; break;
    case 2: s = "word ptr "; break;
    case 4: s = "dword ptr "; break;
    case 8: s = "qword ptr "; break;
    case 16: s = "xmmword ptr "; break;
    case 32: s = "ymmword ptr "; break;
    case 64: s = "zmmword ptr "; break;
    default: s = std::to_string(m.size_bytes) + "-byte ptr ";
  }
  std::string inside;
  const auto term = [&](const std::string& t) { inside += (inside.empty() ? "" : " + ") + t; };
  if (m.base.cls != RegClass::None) term(reg_name(m.base));
  if (m.index.cls != RegClass::None) term(reg_name(m.index) + (m.scale != 1 ? "*" + std::to_string(m.scale) : ""));
  if (!m.label.empty()) term(m.label);
  if (m.disp != 0 || inside.empty()) {
    if (m.disp < 0 && !inside.empty()) inside += " - " + hex(-static_cast<int64_t>(m.disp));
    else term(hex(m.disp));
  }
  return s + "[" + inside + "]";
}

std::string operand_text(const Operand& op) {
  if (const auto* r = std::get_if<Reg>(&op)) return reg_name(*r);
  if (const auto* m = std::get_if<Mem>(&op)) return mem_text(*m);
  if (const auto* i = std::get_if<Imm>(&op)) return std::to_string(i->value);
  if (const auto* l = std::get_if<LabelRef>(&op)) return l->name;
  const auto& k = std::get<Mask>(op);
  return "{" + reg_name(k.k) + "}" + (k.zeroing ? "{z}" : "");
}

// What kind of operand this is, for "no form takes (xmm, r32)" messages.
std::string operand_kind(const Operand& op) {
  if (const auto* r = std::get_if<Reg>(&op)) {
    if (is_gpr(r->cls)) return "r" + std::to_string(reg_bits(r->cls));
    if (is_vec(r->cls)) return r->cls == RegClass::Xmm ? "xmm" : r->cls == RegClass::Ymm ? "ymm" : "zmm";
    return r->cls == RegClass::K ? "k" : reg_name(*r);
  }
  if (const auto* m = std::get_if<Mem>(&op)) return m->size_bytes ? "m" + std::to_string(m->size_bytes * 8) : "m";
  if (std::holds_alternative<Imm>(op)) return "imm";
  if (std::holds_alternative<LabelRef>(op)) return "label";
  return "mask";
}

// ---------------------------------------------------------------- operand matching

int alt_bits(const Alt& a, int P) {
  switch (a.rule) {
    case Rule::P: return P;
    case Rule::Half: return P / 2;
    case Rule::Quarter: return P / 4;
    case Rule::Eighth: return P / 8;
    default: return a.bits;
  }
}

// An immediate for a field of `bits` (8, 16, 32) may be written signed or unsigned; one sign-extended to 64 bits
// (`sext64`) must be a signed 32-bit value.
bool imm_fits(int64_t v, int bits, bool sext64) {
  if (bits >= 64) return true;
  if (sext64) return v >= INT32_MIN && v <= INT32_MAX;
  return v >= -(int64_t{1} << (bits - 1)) && v < (int64_t{1} << bits);
}

// imm8 sign-extended to the operand size P: the value as P bits must be the sign extension of its low byte.
bool simm8_fits(int64_t v, int P) {
  if (P < 64) {  // (P is 16 or 32: no vector form takes an s8)
    if (!imm_fits(v, P, false)) return false;
    const uint64_t mask = (uint64_t{1} << P) - 1, sign = uint64_t{1} << (P - 1);
    const uint64_t u = static_cast<uint64_t>(v) & mask;
    v = static_cast<int64_t>(u & sign ? u | ~mask : u);
  }
  return v >= -128 && v <= 127;
}

bool accepts(const Alt& a, const Operand& op, int P) {
  const int bits = alt_bits(a, P);
  const auto* r = std::get_if<Reg>(&op);
  switch (a.kind) {
    case Kind::Gpr: return r && is_gpr(r->cls) && reg_bits(r->cls) == bits;
    case Kind::Acc: return r && is_gpr(r->cls) && reg_bits(r->cls) == bits && r->num == 0;
    case Kind::Cl: return r && *r == gpr8(1);
    case Kind::Vec: return r && is_vec(r->cls) && reg_bits(r->cls) == std::max(bits, 128);
    case Kind::K: return r && r->cls == RegClass::K;
    case Kind::Mem: {
      const auto* m = std::get_if<Mem>(&op);
      return m && (a.rule == Rule::Any || int64_t{m->size_bytes} * 8 == bits);
    }
    case Kind::Imm: {
      const auto* i = std::get_if<Imm>(&op);
      return i && (a.rule == Rule::P ? imm_fits(i->value, std::min(P, 32), P == 64) : imm_fits(i->value, bits, false));
    }
    case Kind::SImm8: {
      const auto* i = std::get_if<Imm>(&op);
      return i && simm8_fits(i->value, P);
    }
    case Kind::One: {
      const auto* i = std::get_if<Imm>(&op);
      return i && i->value == 1;
    }
    case Kind::Rel: return std::holds_alternative<LabelRef>(op);
  }
  return false;
}

// The immediate's width in bytes for the alternative the operand matched.
int imm_bytes(const Slot& s, const Operand& op, int P) {
  for (uint8_t i = 0; i < s.n; ++i) {
    const Alt& a = s.alts[i];
    if (!accepts(a, op, P)) continue;
    if (a.kind == Kind::SImm8) return 1;
    if (a.kind == Kind::Imm) return (a.rule == Rule::P ? std::min(P, 32) : a.bits) / 8;
    return 0;
  }
  return 0;
}

bool matches(const Form& f, int P, std::span<const Operand> ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const Slot& s = f.slots[i];
    bool ok = false;
    for (uint8_t j = 0; j < s.n && !ok; ++j) ok = accepts(s.alts[j], ops[i], P);
    if (!ok) return false;
  }
  return true;
}

// ---------------------------------------------------------------- encoding

// One encoded instruction (at most 17 bytes: lock, 66, a mandatory prefix, REX, two map bytes, opcode, ModRM, SIB,
// disp32, imm32; a jump adds its rel32 to at most 3). disp_at: where a rip-relative label's disp32 sits.
struct Code {
  std::array<uint8_t, 24> b{};
  uint8_t n = 0;
  int8_t disp_at = -1;
  void put(uint8_t x) { b[n++] = x; }
  void put_le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) put(static_cast<uint8_t>(v >> (8 * i)));
  }
};

// The operands sorted into the fields the layout names.
struct Fields {
  int reg = 0;                // ModRM.reg: a register number (0-31) or the /digit
  bool modrm = false;
  const Reg* rm_reg = nullptr;
  const Mem* rm_mem = nullptr;
  int vvvv = 0;               // 0 when unused (encoded inverted as 1111)
  int opreg = -1;             // the register added to the opcode
  int is4 = -1;
  int64_t imm = 0;
  int imm_bytes = 0;
  bool byte_reg_needs_rex = false;  // spl, bpl, sil, dil
};

Fields sort_fields(const Form& f, std::span<const Operand> ops, int P) {
  Fields x;
  if (f.ext >= 0 && !(f.flags & kModrmOnly)) x.reg = f.ext, x.modrm = true;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Operand& op = ops[i];
    const Reg* r = std::get_if<Reg>(&op);
    if (r && r->cls == RegClass::Gpr8 && r->num >= 4 && r->num < 8) x.byte_reg_needs_rex = true;
    switch (f.slots[i].field) {
      case 'r': x.reg = r->num, x.modrm = true; break;
      case 'm':
        x.modrm = true;
        if (r) x.rm_reg = r;
        else x.rm_mem = &std::get<Mem>(op);
        break;
      case 'v': x.vvvv = r->num; break;
      case 'o': x.opreg = r->num; break;
      case 'l': x.is4 = r->num; break;
      case 'i':
        x.imm = std::get<Imm>(op).value;
        x.imm_bytes = imm_bytes(f.slots[i], op, P);
        break;
      default: break;
    }
  }
  return x;
}

int bit(int v, int n) { return (v >> n) & 1; }

// ModRM, SIB and displacement. `scale` is EVEX's disp8*N compression (1 elsewhere).
void put_modrm(Code& c, const Fields& x, int scale) {
  const int reg = (x.reg & 7) << 3;
  if (x.rm_reg) return c.put(static_cast<uint8_t>(0xC0 | reg | (x.rm_reg->num & 7)));
  const Mem& m = *x.rm_mem;
  const int ss = m.scale == 8 ? 3 : m.scale == 4 ? 2 : m.scale == 2 ? 1 : 0;
  const bool index = m.index.cls != RegClass::None;
  if (m.base.cls == RegClass::Rip) {
    c.put(static_cast<uint8_t>(reg | 5));
    c.disp_at = static_cast<int8_t>(c.n);
    return c.put_le(static_cast<uint32_t>(m.disp), 4);
  }
  if (m.base.cls == RegClass::None) {  // [index*scale + disp32] or [disp32]: SIB with no base (rm 101 alone is rip)
    c.put(static_cast<uint8_t>(reg | 4));
    c.put(static_cast<uint8_t>(ss << 6 | (index ? m.index.num & 7 : 4) << 3 | 5));
    return c.put_le(static_cast<uint32_t>(m.disp), 4);
  }
  const int base = m.base.num & 7;
  int mod = 2;
  if (m.disp == 0 && base != 5) mod = 0;  // rbp/r13 with mod 00 would mean rip or no base: they take a disp8 of 0
  else if (m.disp % scale == 0 && m.disp / scale >= -128 && m.disp / scale <= 127) mod = 1;
  if (index || base == 4) {  // rsp/r12 as base can only be said through a SIB byte
    c.put(static_cast<uint8_t>(mod << 6 | reg | 4));
    c.put(static_cast<uint8_t>(ss << 6 | (index ? m.index.num & 7 : 4) << 3 | base));
  } else {
    c.put(static_cast<uint8_t>(mod << 6 | reg | base));
  }
  if (mod == 1) c.put(static_cast<uint8_t>(m.disp / scale));
  if (mod == 2) c.put_le(static_cast<uint32_t>(m.disp), 4);
}

// The REX/VEX/EVEX extension bits of the rm operand: B is bit 3 of its register or base (or of an opcode-embedded
// register), X bit 3 of its index. (EVEX also puts bit 4 of a vector rm register in X: encode_evex.)
int ext_b(const Fields& x) {
  if (x.rm_reg) return bit(x.rm_reg->num, 3);
  if (x.rm_mem && x.rm_mem->base.cls == RegClass::Gpr64) return bit(x.rm_mem->base.num, 3);
  return x.opreg >= 0 ? bit(x.opreg, 3) : 0;
}
int ext_x(const Fields& x) { return x.rm_mem && x.rm_mem->index.cls != RegClass::None ? bit(x.rm_mem->index.num, 3) : 0; }

constexpr uint8_t pp_code(uint8_t pp) { return pp == 0x66 ? 1 : pp == 0xF3 ? 2 : pp == 0xF2 ? 3 : 0; }

void put_tail(Code& c, const Form& f, const Fields& x, int scale) {
  c.put(static_cast<uint8_t>(f.op + (x.opreg >= 0 ? x.opreg & 7 : 0)));
  if (x.modrm) put_modrm(c, x, scale);
  else if (f.flags & kModrmOnly) c.put(static_cast<uint8_t>(0xC0 | f.ext << 3));
  if (x.is4 >= 0) c.put(static_cast<uint8_t>(x.is4 << 4));
  c.put_le(static_cast<uint64_t>(x.imm), x.imm_bytes);
}

void put_map(Code& c, uint8_t map) {
  if (map >= 1) c.put(0x0F);
  if (map == 2) c.put(0x38);
  if (map == 3) c.put(0x3A);
}

Code encode_legacy(const Form& f, const Fields& x, int P, bool lock) {
  Code c;
  if (lock) c.put(0xF0);
  if (P == 16) c.put(0x66);
  if (f.pp) c.put(f.pp);
  const int w = P == 64 && !(f.flags & kD64);
  const int rex = w << 3 | bit(x.reg, 3) << 2 | ext_x(x) << 1 | ext_b(x);
  if (rex || x.byte_reg_needs_rex) c.put(static_cast<uint8_t>(0x40 | rex));
  put_map(c, f.map);
  put_tail(c, f, x, 1);
  return c;
}

Code encode_vex(const Form& f, const Fields& x, int P) {
  Code c;
  const int r = bit(x.reg, 3), xb = ext_x(x), b = ext_b(x), w = f.vex_w, l = P == 256;
  const int low = (~x.vvvv & 15) << 3 | l << 2 | pp_code(f.pp);
  if (!xb && !b && !w && f.map == 1) {  // the 2-byte form, as assemblers prefer
    c.put(0xC5);
    c.put(static_cast<uint8_t>((r ^ 1) << 7 | low));
  } else {
    c.put(0xC4);
    c.put(static_cast<uint8_t>((r ^ 1) << 7 | (xb ^ 1) << 6 | (b ^ 1) << 5 | f.map));
    c.put(static_cast<uint8_t>(w << 7 | low));
  }
  put_tail(c, f, x, 1);
  return c;
}

Code encode_evex(const Form& f, const Fields& x, int P, const Mask* mask, int mem_bytes) {
  Code c;
  const int r = bit(x.reg, 3), r2 = bit(x.reg, 4), b = ext_b(x);
  const int xb = x.rm_reg ? (is_vec(x.rm_reg->cls) ? bit(x.rm_reg->num, 4) : 0) : ext_x(x);
  const int ll = P == 512 ? 2 : P == 256 ? 1 : 0;
  c.put(0x62);
  c.put(static_cast<uint8_t>((r ^ 1) << 7 | (xb ^ 1) << 6 | (b ^ 1) << 5 | (r2 ^ 1) << 4 | f.map));
  c.put(static_cast<uint8_t>(f.evex_w << 7 | (~x.vvvv & 15) << 3 | 4 | pp_code(f.pp)));
  c.put(static_cast<uint8_t>((mask && mask->zeroing) << 7 | ll << 5 | (bit(x.vvvv, 4) ^ 1) << 3 | (mask ? mask->k.num : 0)));
  // without embedded broadcast, disp8*N's N is the memory operand's size for every tuple type (SDM tables 2-34, 2-35)
  put_tail(c, f, x, std::max(mem_bytes, 1));
  return c;
}

// Whether VEX can say these operands: 4 register bits, no zmm, no mask.
bool vex_reaches(std::span<const Operand> ops, int P) {
  if (P > 256) return false;
  for (const auto& op : ops)
    if (const auto* r = std::get_if<Reg>(&op); r && is_vec(r->cls) && r->num >= 16) return false;
  return true;
}

// ---------------------------------------------------------------- one instruction

std::string instr_text(const Instr& in) {
  if (in.mnemonic == "data") return "data (" + std::to_string(in.data.size()) + " bytes)";
  std::string s = in.mnemonic;
  for (size_t i = 0; i < in.ops.size(); ++i) s += (i ? ", " : " ") + operand_text(in.ops[i]);
  return s;
}

[[noreturn]] void fail(size_t index, const Instr& in, const std::string& why) {
  throw std::invalid_argument("x86 assemble: instruction " + std::to_string(index) + " '" + instr_text(in) + "': " + why);
}

void check_operands(size_t index, const Instr& in) {
  for (size_t i = 0; i < in.ops.size(); ++i) {
    const Operand& op = in.ops[i];
    if (const auto* r = std::get_if<Reg>(&op)) {
      if (!reg_exists(*r) || r->cls == RegClass::Rip) fail(index, in, "operand " + std::to_string(i) + " is not a register");
    } else if (const auto* m = std::get_if<Mem>(&op)) {
      const bool base_ok = m->base.cls == RegClass::None || m->base.cls == RegClass::Rip || (m->base.cls == RegClass::Gpr64 && reg_exists(m->base));
      if (!base_ok) fail(index, in, "a memory base must be a 64-bit register or rip");
      if (m->index.cls != RegClass::None && (m->index.cls != RegClass::Gpr64 || !reg_exists(m->index) || m->index.num == 4))
        fail(index, in, "a memory index must be a 64-bit register other than rsp");
      if (m->scale != 1 && m->scale != 2 && m->scale != 4 && m->scale != 8) fail(index, in, "a memory scale must be 1, 2, 4 or 8");
      if (m->base.cls == RegClass::Rip && m->index.cls != RegClass::None) fail(index, in, "rip-relative memory takes no index");
      if (!m->label.empty() && m->base.cls != RegClass::Rip) fail(index, in, "a label in memory needs base rip");
      if (m->size_bytes < 0) fail(index, in, "a memory size cannot be negative");
    } else if (const auto* k = std::get_if<Mask>(&op)) {
      if (i + 1 != in.ops.size()) fail(index, in, "a write mask must be the last operand");
      if (k->k.cls != RegClass::K || !reg_exists(k->k)) fail(index, in, "a write mask must be k1-k7");
      if (k->k.num == 0) fail(index, in, "k0 cannot be a write mask (it means no mask)");
    }
  }
}

// The chosen encoding of one instruction, and what layout needs to know of it.
struct Encoded {
  Code code;
  bool jump = false;          // the code is a rel32 jump; short_op its rel8 form's opcode (0: none)
  uint8_t short_op = 0;
  const std::string* label = nullptr;  // the jump's target, or the rip-relative memory's label
  int32_t addend = 0;
};

Encoded encode_one(size_t index, const Instr& in) {
  check_operands(index, in);
  std::string lower(in.mnemonic.size(), '\0');  // mnemonics are short: no allocation
  std::transform(in.mnemonic.begin(), in.mnemonic.end(), lower.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  std::string_view mn = lower;
  const bool lock = mn.starts_with("lock ");
  if (lock) mn.remove_prefix(5);
  std::span<const Operand> ops(in.ops);
  const Mask* mask = !ops.empty() ? std::get_if<Mask>(&ops.back()) : nullptr;
  if (mask) ops = ops.first(ops.size() - 1);
  const auto forms = forms_of(mn);
  if (forms.empty()) fail(index, in, "unknown mnemonic '" + std::string(mn) + "'");

  const Mem* mem = nullptr;
  for (const auto& op : ops)
    if (const auto* m = std::get_if<Mem>(&op)) mem = m;
  const bool dest_mem_or_k = !ops.empty() && (std::holds_alternative<Mem>(ops[0]) || (std::holds_alternative<Reg>(ops[0]) && std::get<Reg>(ops[0]).cls == RegClass::K));

  std::optional<Encoded> best_plain, best_evex;  // legacy or VEX; EVEX only where neither can
  std::string refusal;
  const auto consider = [](std::optional<Encoded>& best, Encoded e) {
    if (!best || e.code.n < best->code.n) best = e;
  };
  for (const Form& f : forms) {
    if (f.nops != ops.size()) continue;
    for (unsigned sizes = f.sizes; sizes; sizes &= sizes - 1) {
      const int P = 8 << std::countr_zero(sizes);
      if (!matches(f, P, ops)) continue;
      const Fields x = sort_fields(f, ops, P);
      if ((f.flags & kNotZero) && x.opreg == 0) continue;
      if (lock && (!(f.flags & kLockable) || !(f.enc & kLegacy) || !std::holds_alternative<Mem>(ops[0]))) {
        refusal = "lock takes a read-modify-write instruction with a memory destination";
        continue;
      }
      Encoded e;
      e.label = mem && !mem->label.empty() ? &mem->label : nullptr;
      e.addend = mem ? mem->disp : 0;
      if (f.enc & kLegacy) {
        if (mask) {
          refusal = "a write mask needs an EVEX instruction";
          continue;
        }
        e.code = encode_legacy(f, x, P, lock);
        if (f.slots[0].field == 'j') {
          e.jump = true, e.short_op = f.short_op, e.label = &std::get<LabelRef>(ops[0]).name;
          e.code.put_le(0, 4);
        }
        consider(best_plain, e);
        continue;
      }
      if ((f.enc & kVex) && !mask && vex_reaches(ops, P)) {
        e.code = encode_vex(f, x, P);
        consider(best_plain, e);
        continue;
      }
      if (!(f.enc & kEvex)) {
        refusal = std::string(mn) + " has only a VEX encoding, which reaches no zmm, xmm16-31 or write mask";
        continue;
      }
      if (mask && (f.flags & kNoMask)) {
        refusal = std::string(mn) + " takes no write mask";
        continue;
      }
      if (mask && mask->zeroing && dest_mem_or_k) {
        refusal = "zeroing-masking {z} needs a vector register destination";
        continue;
      }
      e.code = encode_evex(f, x, P, mask, mem ? mem->size_bytes : 0);
      consider(best_evex, e);
    }
  }
  if (best_plain) return *best_plain;
  if (best_evex) return *best_evex;
  if (!refusal.empty()) fail(index, in, refusal);
  std::string kinds;
  for (const auto& op : ops) kinds += (kinds.empty() ? "" : ", ") + operand_kind(op);
  fail(index, in, "no form of " + std::string(mn) + " takes (" + kinds + ")");
}

// ---------------------------------------------------------------- the program

struct Piece {
  enum Kind : uint8_t { Bytes, Jump, Label, Align } kind = Bytes;
  size_t at = 0, len = 0;  // the bytes in the shared buffer (a jump: its rel32 form)
  int label = -1;            // Jump: the target; Label: the one defined; Bytes: a rip-relative label or -1
  int32_t addend = 0;
  int8_t disp_at = -1;
  uint8_t short_op = 0;
  bool is_long = false;
  uint8_t fill = 0xCC;
  uint64_t align = 1;
  size_t instr = 0;
  uint64_t start = 0;
  uint64_t pad_from = 0;     // Align: where its padding begins
  uint64_t size() const { return kind == Jump ? (is_long ? len : 2) : kind == Bytes ? len : 0; }
};

}  // namespace

std::optional<Reg> parse_reg(std::string_view name) {
  std::string s(name.size(), '\0');
  std::transform(name.begin(), name.end(), s.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (s == "rip") return rip;
  for (int i = 0; i < 8; ++i) {
    if (s == kGpr64[i]) return gpr64(i);
    if (s == kGpr32[i]) return gpr32(i);
    if (s == kGpr16[i]) return gpr16(i);
    if (s == kGpr8[i]) return gpr8(i);
  }
  // a prefix and a decimal number: r8..r15 with an optional d/w/b suffix, xmm/ymm/zmm0-31, k0-7
  const auto number = [](std::string_view digits, int limit) -> int {
    if (digits.empty() || digits.size() > 2 || (digits.size() == 2 && digits[0] == '0')) return -1;
    int v = 0;
    for (char ch : digits) {
      if (ch < '0' || ch > '9') return -1;
      v = v * 10 + (ch - '0');
    }
    return v < limit ? v : -1;
  };
  const std::string_view v(s);
  for (const auto& [prefix, cls] : {std::pair{"xmm", RegClass::Xmm}, {"ymm", RegClass::Ymm}, {"zmm", RegClass::Zmm}})
    if (v.starts_with(prefix))
      if (const int n = number(v.substr(3), 32); n >= 0) return Reg{cls, static_cast<uint8_t>(n)};
  if (v.starts_with("k"))
    if (const int n = number(v.substr(1), 8); n >= 0) return kreg(n);
  if (v.starts_with("r") && v.size() >= 2) {
    const char last = v.back();
    const RegClass cls = last == 'd' ? RegClass::Gpr32 : last == 'w' ? RegClass::Gpr16 : last == 'b' ? RegClass::Gpr8 : RegClass::Gpr64;
    const std::string_view digits = v.substr(1, v.size() - 1 - (cls != RegClass::Gpr64));
    if (const int n = number(digits, 16); n >= 8) return Reg{cls, static_cast<uint8_t>(n)};
  }
  return std::nullopt;
}

std::string reg_name(Reg r) {
  if (!reg_exists(r)) return "?";
  const int n = r.num;
  switch (r.cls) {
    case RegClass::Gpr64: return n < 8 ? std::string(kGpr64[n]) : "r" + std::to_string(n);
    case RegClass::Gpr32: return n < 8 ? std::string(kGpr32[n]) : "r" + std::to_string(n) + "d";
    case RegClass::Gpr16: return n < 8 ? std::string(kGpr16[n]) : "r" + std::to_string(n) + "w";
    case RegClass::Gpr8: return n < 8 ? std::string(kGpr8[n]) : "r" + std::to_string(n) + "b";
    case RegClass::Xmm: return "xmm" + std::to_string(n);
    case RegClass::Ymm: return "ymm" + std::to_string(n);
    case RegClass::Zmm: return "zmm" + std::to_string(n);
    case RegClass::K: return "k" + std::to_string(n);
    case RegClass::Rip: return "rip";
    default: return "?";
  }
}

std::string to_string(const Instr& instr) { return instr_text(instr); }

std::vector<std::string_view> mnemonics() { return all_mnemonics(); }

Assembled assemble(std::span<const Instr> program) {
  std::vector<uint8_t> buf;
  std::vector<Piece> pieces;
  pieces.reserve(program.size());
  std::unordered_map<std::string_view, int> ids;  // label name -> its index below; the names live in `program`
  std::vector<std::string_view> names;
  std::vector<int64_t> where;  // each label's offset, once laid out
  std::vector<size_t> defined_by;
  const auto id_of = [&](const std::string& name) {
    const auto [it, fresh] = ids.try_emplace(name, static_cast<int>(names.size()));
    if (fresh) names.push_back(name), where.push_back(-1), defined_by.push_back(SIZE_MAX);
    return it->second;
  };

  for (size_t i = 0; i < program.size(); ++i) {
    const Instr& in = program[i];
    Piece p;
    p.instr = i;
    if (in.mnemonic == "label") {
      const auto* l = in.ops.size() == 1 ? std::get_if<LabelRef>(&in.ops[0]) : nullptr;
      if (!l || l->name.empty()) fail(i, in, "a label definition takes one label name");
      p.kind = Piece::Label, p.label = id_of(l->name);
      if (defined_by[p.label] != SIZE_MAX) fail(i, in, "label '" + l->name + "' is already defined by instruction " + std::to_string(defined_by[p.label]));
      defined_by[p.label] = i;
    } else if (in.mnemonic == "align") {
      const auto* n = !in.ops.empty() ? std::get_if<Imm>(&in.ops[0]) : nullptr;
      const auto* fill = in.ops.size() == 2 ? std::get_if<Imm>(&in.ops[1]) : nullptr;
      if (!n || n->value < 1 || n->value > (1 << 16) || (n->value & (n->value - 1)) || in.ops.size() > 2 || (in.ops.size() == 2 && !fill))
        fail(i, in, "align takes a power of two up to 65536 and optionally a fill byte");
      if (fill && (fill->value < 0 || fill->value > 255)) fail(i, in, "the fill must be a byte");
      p.kind = Piece::Align, p.align = static_cast<uint64_t>(n->value), p.fill = fill ? static_cast<uint8_t>(fill->value) : 0xCC;
    } else if (in.mnemonic == "data") {
      if (!in.ops.empty()) fail(i, in, "data takes its bytes, no operands");
      p.at = buf.size(), p.len = in.data.size();
      buf.insert(buf.end(), in.data.begin(), in.data.end());
    } else {
      const Encoded e = encode_one(i, in);
      p.kind = e.jump ? Piece::Jump : Piece::Bytes;
      p.at = buf.size(), p.len = e.code.n;
      p.label = e.label ? id_of(*e.label) : -1;
      p.addend = e.addend, p.disp_at = e.code.disp_at, p.short_op = e.short_op, p.is_long = e.jump && !e.short_op;
      buf.insert(buf.end(), e.code.b.begin(), e.code.b.begin() + e.code.n);
    }
    pieces.push_back(p);
  }
  for (const Piece& p : pieces)
    if (p.label >= 0 && defined_by[p.label] == SIZE_MAX)
      fail(p.instr, program[p.instr], "label '" + std::string(names[p.label]) + "' is never defined");

  // Lay out with every jump short, lengthen the ones whose target is out of rel8 reach, and repeat: jumps only ever
  // grow, so this ends, and when nothing grows every short jump fits.
  uint64_t total = 0;
  for (bool grew = true; grew;) {
    total = 0;
    for (Piece& p : pieces) {
      if (p.kind == Piece::Align) p.pad_from = total, total = (total + p.align - 1) & ~(p.align - 1);
      p.start = total;
      if (p.kind == Piece::Label) where[p.label] = static_cast<int64_t>(total);
      total += p.size();
    }
    grew = false;
    for (Piece& p : pieces)
      if (p.kind == Piece::Jump && !p.is_long) {
        const int64_t rel = where[p.label] - static_cast<int64_t>(p.start + 2);
        if (rel < -128 || rel > 127) p.is_long = grew = true;
      }
  }

  Assembled out;
  out.code.assign(total, 0);
  for (const Piece& p : pieces) {
    uint8_t* dst = out.code.data() + p.start;
    const int64_t end = static_cast<int64_t>(p.start + p.size());
    const auto put32 = [&](uint8_t* at, int64_t v) {
      if (v < INT32_MIN || v > INT32_MAX) fail(p.instr, program[p.instr], "the target is beyond a 32-bit displacement");
      for (int k = 0; k < 4; ++k) at[k] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * k));
    };
    if (p.kind == Piece::Align) std::fill(out.code.data() + p.pad_from, dst, p.fill);
    if (p.kind == Piece::Bytes || (p.kind == Piece::Jump && p.is_long)) {
      std::copy_n(buf.data() + p.at, p.len, dst);
      if (p.kind == Piece::Jump) put32(dst + p.len - 4, where[p.label] - end);
      else if (p.disp_at >= 0 && p.label >= 0) put32(dst + p.disp_at, where[p.label] + p.addend - end);
    } else if (p.kind == Piece::Jump) {
      dst[0] = p.short_op;
      dst[1] = static_cast<uint8_t>(where[p.label] - end);
    }
  }
  out.labels.reserve(ids.size());
  for (const auto& [name, id] : ids) out.labels.emplace(std::string(name), static_cast<size_t>(where[id]));
  return out;
}

}  // namespace th::x86
