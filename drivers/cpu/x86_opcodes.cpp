// The x86-64 instruction forms, as data. Opcode bytes and fields are from the Intel SDM volume 2 (checked against GNU
// as: tests/test_x86_encode.py assembles every form both ways). A form is written as
//   operand tokens   "r|m,i": one slot per operand, alternatives split by '|'
//   layout           one character per operand: where it is encoded (see Slot::field)
//   opcode bits      encodings, mandatory prefix, map, opcode, /digit, W (VEX, EVEX), the sizes P may take
// Tokens: r r8 r16 r32 r64 (general register of P bits or fixed), a (accumulator of P bits), cl, v vh vq ve (vector of P,
// P/2, P/4, P/8 bits, at least xmm), x y z (xmm ymm zmm), k (mask), m mh mq me m8..m512 (memory of P.. bits), m* (any
// size), i (immediate of P bits, at most 32, sign-extended to 64), i8 i16 i64 (fixed), s8 (imm8 sign-extended to P),
// 1 (the constant 1), rel (a label).
// Forms of a mnemonic are kept in table order; the assembler takes the shortest encoding among the forms that accept
// the operands (VEX or legacy before EVEX), the first on a tie.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "drivers/cpu/x86_opcodes.h"

namespace th::x86::detail {

namespace {

constexpr uint8_t B = kS8, WDQ = kS16 | kS32 | kS64, DQ = kS32 | kS64, Q = kS64, D = kS32;
constexpr uint8_t X = kS128, Y = kS256, Z = kS512, XY = X | Y, YZ = Y | Z, XYZ = X | Y | Z;
constexpr uint8_t NP = 0, P66 = 0x66, PF3 = 0xF3, PF2 = 0xF2;
constexpr uint8_t M0F = 1, M38 = 2, M3A = 3;
constexpr uint8_t V = kVex, E = kEvex, VE = kVex | kEvex;

Alt parse_alt(std::string_view t) {
  struct Atom {
    std::string_view name;
    Alt alt;
  };
  static constexpr Atom atoms[] = {
      {"r", {Kind::Gpr, Rule::P, 0}},        {"r8", {Kind::Gpr, Rule::Fixed, 8}},    {"r16", {Kind::Gpr, Rule::Fixed, 16}},
      {"r32", {Kind::Gpr, Rule::Fixed, 32}}, {"r64", {Kind::Gpr, Rule::Fixed, 64}},  {"a", {Kind::Acc, Rule::P, 0}},
      {"cl", {Kind::Cl, Rule::Fixed, 8}},    {"v", {Kind::Vec, Rule::P, 0}},         {"vh", {Kind::Vec, Rule::Half, 0}},
      {"vq", {Kind::Vec, Rule::Quarter, 0}}, {"ve", {Kind::Vec, Rule::Eighth, 0}},   {"x", {Kind::Vec, Rule::Fixed, 128}},
      {"y", {Kind::Vec, Rule::Fixed, 256}},  {"z", {Kind::Vec, Rule::Fixed, 512}},   {"k", {Kind::K, Rule::Fixed, 0}},
      {"m", {Kind::Mem, Rule::P, 0}},        {"mh", {Kind::Mem, Rule::Half, 0}},     {"mq", {Kind::Mem, Rule::Quarter, 0}},
      {"me", {Kind::Mem, Rule::Eighth, 0}},  {"m*", {Kind::Mem, Rule::Any, 0}},      {"m8", {Kind::Mem, Rule::Fixed, 8}},
      {"m16", {Kind::Mem, Rule::Fixed, 16}}, {"m32", {Kind::Mem, Rule::Fixed, 32}},  {"m64", {Kind::Mem, Rule::Fixed, 64}},
      {"m128", {Kind::Mem, Rule::Fixed, 128}}, {"m256", {Kind::Mem, Rule::Fixed, 256}}, {"m512", {Kind::Mem, Rule::Fixed, 512}},
      {"i", {Kind::Imm, Rule::P, 0}},        {"i8", {Kind::Imm, Rule::Fixed, 8}},    {"i16", {Kind::Imm, Rule::Fixed, 16}},
      {"i64", {Kind::Imm, Rule::Fixed, 64}}, {"s8", {Kind::SImm8, Rule::Fixed, 8}},  {"1", {Kind::One, Rule::Fixed, 0}},
      {"rel", {Kind::Rel, Rule::Fixed, 32}},
  };
  for (const auto& a : atoms)
    if (a.name == t) return a.alt;
  throw std::logic_error("x86 opcode table: unknown operand token '" + std::string(t) + "'");
}

// The encoder reads each field's operand as one kind: a register for r v o l, a register or memory for m, and so on.
bool field_holds(char field, Kind k) {
  const bool reg = k == Kind::Gpr || k == Kind::Acc || k == Kind::Cl || k == Kind::Vec || k == Kind::K;
  switch (field) {
    case 'r': case 'v': case 'o': case 'l': return reg;
    case 'm': return reg || k == Kind::Mem;
    case 'i': return k == Kind::Imm || k == Kind::SImm8;
    case 'j': return k == Kind::Rel;
    case '-': return reg || k == Kind::One;
    default: return false;
  }
}

struct Hash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

class Table {
 public:
  Table();
  std::span<const Form> find(std::string_view mnemonic) const {
    const auto it = forms_.find(mnemonic);
    return it == forms_.end() ? std::span<const Form>{} : std::span<const Form>(it->second);
  }
  std::vector<std::string_view> names() const {
    std::vector<std::string_view> out;
    for (const auto& [name, forms] : forms_) out.push_back(name);
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  // A form in every field; gp and vec below fill the ones their kind of instruction uses.
  void add(const std::string& name, std::string_view ops, std::string_view layout, uint8_t enc, uint8_t pp, uint8_t map, uint8_t op,
           int ext, uint8_t vex_w, uint8_t evex_w, uint8_t sizes, uint8_t flags, uint8_t short_op) {
    Form f;
    f.ops_text = ops;
    size_t i = 0;
    for (size_t start = 0; start < ops.size(); ++i) {
      if (i >= f.slots.size() || i >= layout.size()) throw std::logic_error("x86 opcode table: " + name + " " + std::string(ops) + ": too many operands");
      const size_t end = std::min(ops.find(',', start), ops.size());
      const std::string_view tok = ops.substr(start, end - start);
      Slot& s = f.slots[i];
      const size_t bar = tok.find('|');
      s.alts[0] = parse_alt(tok.substr(0, bar));
      s.n = 1;
      if (bar != std::string_view::npos) s.alts[s.n++] = parse_alt(tok.substr(bar + 1));
      s.field = layout[i];
      for (uint8_t j = 0; j < s.n; ++j)
        if (!field_holds(s.field, s.alts[j].kind))
          throw std::logic_error("x86 opcode table: " + name + " " + std::string(ops) + ": field '" + s.field + "' cannot hold operand " + std::to_string(i));
      start = end + 1;
    }
    if (i != layout.size()) throw std::logic_error("x86 opcode table: " + name + " " + std::string(ops) + ": layout does not fit");
    f.nops = static_cast<uint8_t>(i);
    f.enc = enc, f.pp = pp, f.map = map, f.op = op, f.ext = static_cast<int8_t>(ext), f.vex_w = vex_w, f.evex_w = evex_w;
    f.sizes = sizes, f.flags = flags, f.short_op = short_op;
    forms_[name].push_back(f);
  }
  void gp(const std::string& name, std::string_view ops, std::string_view layout, uint8_t op, uint8_t sizes, int ext = -1, uint8_t map = 0,
          uint8_t flags = 0, uint8_t pp = 0) {
    add(name, ops, layout, kLegacy, pp, map, op, ext, 0, 0, sizes, flags, 0);
  }
  void jump(const std::string& name, uint8_t map, uint8_t op, uint8_t short_op) { add(name, "rel", "j", kLegacy, 0, map, op, -1, 0, 0, Q, kD64, short_op); }
  void vec(const std::string& name, std::string_view ops, std::string_view layout, uint8_t enc, uint8_t pp, uint8_t map, uint8_t op,
           uint8_t vex_w, uint8_t evex_w, uint8_t sizes, int ext = -1, uint8_t flags = 0) {
    add(name, ops, layout, enc, pp, map, op, ext, vex_w, evex_w, sizes, flags, 0);
  }

  void general_purpose();
  void vector_moves();
  void vector_arithmetic();
  void vector_integer();
  void vector_conversions();
  void vector_lanes();
  void masks();

  std::unordered_map<std::string, std::vector<Form>, Hash, std::equal_to<>> forms_;
};

Table::Table() {
  general_purpose();
  vector_moves();
  vector_arithmetic();
  vector_integer();
  vector_conversions();
  vector_lanes();
  masks();
}

void Table::general_purpose() {
  // add or adc sbb and sub xor cmp: opcodes 8n+0..5 and the immediate group 80/81/83 /n
  const char* alu[] = {"add", "or", "adc", "sbb", "and", "sub", "xor", "cmp"};
  for (int n = 0; n < 8; ++n) {
    const uint8_t b = static_cast<uint8_t>(8 * n), lock = n == 7 ? 0 : kLockable;
    gp(alu[n], "r|m,r", "mr", b, B, -1, 0, lock);
    gp(alu[n], "r|m,r", "mr", b + 1, WDQ, -1, 0, lock);
    gp(alu[n], "r,m", "rm", b + 2, B);
    gp(alu[n], "r,m", "rm", b + 3, WDQ);
    gp(alu[n], "r|m,s8", "mi", 0x83, WDQ, n, 0, lock);  // before the accumulator form: as takes it on a tie (ax, -1)
    gp(alu[n], "a,i", "-i", b + 4, B);
    gp(alu[n], "a,i", "-i", b + 5, WDQ);
    gp(alu[n], "r|m,i", "mi", 0x80, B, n, 0, lock);
    gp(alu[n], "r|m,i", "mi", 0x81, WDQ, n, 0, lock);
  }
  gp("mov", "r|m,r", "mr", 0x88, B);
  gp("mov", "r|m,r", "mr", 0x89, WDQ);
  gp("mov", "r,m", "rm", 0x8A, B);
  gp("mov", "r,m", "rm", 0x8B, WDQ);
  gp("mov", "r,i", "oi", 0xB0, B);
  gp("mov", "r,i", "oi", 0xB8, kS16 | kS32);
  gp("mov", "r|m,i", "mi", 0xC6, B, 0);
  gp("mov", "r|m,i", "mi", 0xC7, WDQ, 0);
  gp("mov", "r,i64", "oi", 0xB8, Q);
  gp("movabs", "r,i64", "oi", 0xB8, Q);
  gp("movzx", "r,r8|m8", "rm", 0xB6, WDQ, -1, M0F);
  gp("movzx", "r,r16|m16", "rm", 0xB7, DQ, -1, M0F);
  gp("movsx", "r,r8|m8", "rm", 0xBE, WDQ, -1, M0F);
  gp("movsx", "r,r16|m16", "rm", 0xBF, DQ, -1, M0F);
  gp("movsxd", "r,r32|m32", "rm", 0x63, Q);
  gp("lea", "r,m*", "rm", 0x8D, WDQ);
  gp("test", "r|m,r", "mr", 0x84, B);
  gp("test", "r|m,r", "mr", 0x85, WDQ);
  gp("test", "r,m", "rm", 0x84, B);  // test is symmetric: a register-first memory operand is the same instruction
  gp("test", "r,m", "rm", 0x85, WDQ);
  gp("test", "a,i", "-i", 0xA8, B);
  gp("test", "a,i", "-i", 0xA9, WDQ);
  gp("test", "r|m,i", "mi", 0xF6, B, 0);
  gp("test", "r|m,i", "mi", 0xF7, WDQ, 0);
  const struct {
    const char* name;
    int ext;
    uint8_t flags;
  } unary[] = {{"not", 2, kLockable}, {"neg", 3, kLockable}, {"mul", 4, 0}, {"imul", 5, 0}, {"div", 6, 0}, {"idiv", 7, 0}};
  for (const auto& u : unary) {
    gp(u.name, "r|m", "m", 0xF6, B, u.ext, 0, u.flags);
    gp(u.name, "r|m", "m", 0xF7, WDQ, u.ext, 0, u.flags);
  }
  for (int n = 0; n < 2; ++n) {
    gp(n ? "dec" : "inc", "r|m", "m", 0xFE, B, n, 0, kLockable);
    gp(n ? "dec" : "inc", "r|m", "m", 0xFF, WDQ, n, 0, kLockable);
  }
  gp("imul", "r,r|m", "rm", 0xAF, WDQ, -1, M0F);
  gp("imul", "r,r|m,s8", "rmi", 0x6B, WDQ);
  gp("imul", "r,r|m,i", "rmi", 0x69, WDQ);
  const struct {
    const char* name;
    int ext;
  } shifts[] = {{"rol", 0}, {"ror", 1}, {"rcl", 2}, {"rcr", 3}, {"shl", 4}, {"sal", 4}, {"shr", 5}, {"sar", 7}};
  for (const auto& s : shifts) {
    gp(s.name, "r|m,1", "m-", 0xD0, B, s.ext);
    gp(s.name, "r|m,1", "m-", 0xD1, WDQ, s.ext);
    gp(s.name, "r|m,cl", "m-", 0xD2, B, s.ext);
    gp(s.name, "r|m,cl", "m-", 0xD3, WDQ, s.ext);
    gp(s.name, "r|m,i8", "mi", 0xC0, B, s.ext);
    gp(s.name, "r|m,i8", "mi", 0xC1, WDQ, s.ext);
  }
  gp("cbw", "", "", 0x98, kS16);
  gp("cwde", "", "", 0x98, D);
  gp("cdqe", "", "", 0x98, Q);
  gp("cwd", "", "", 0x99, kS16);
  gp("cdq", "", "", 0x99, D);
  gp("cqo", "", "", 0x99, Q);
  // the condition codes, with every alias assemblers take
  const struct {
    const char* names[3];
    uint8_t cc;
  } conds[] = {{{"o"}, 0},         {{"no"}, 1},       {{"b", "c", "nae"}, 2}, {{"ae", "nb", "nc"}, 3}, {{"e", "z"}, 4},   {{"ne", "nz"}, 5},
               {{"be", "na"}, 6},  {{"a", "nbe"}, 7}, {{"s"}, 8},             {{"ns"}, 9},             {{"p", "pe"}, 10}, {{"np", "po"}, 11},
               {{"l", "nge"}, 12}, {{"ge", "nl"}, 13}, {{"le", "ng"}, 14},    {{"g", "nle"}, 15}};
  for (const auto& c : conds)
    for (const char* n : c.names) {
      if (!n) break;
      const std::string cc(n);
      gp("set" + cc, "r8|m8", "m", 0x90 + c.cc, B, 0, M0F);
      gp("cmov" + cc, "r,r|m", "rm", 0x40 + c.cc, WDQ, -1, M0F);
      jump("j" + cc, M0F, 0x80 + c.cc, 0x70 + c.cc);
    }
  jump("jmp", 0, 0xE9, 0xEB);
  jump("call", 0, 0xE8, 0);
  gp("jmp", "r|m", "m", 0xFF, Q, 4, 0, kD64);
  gp("call", "r|m", "m", 0xFF, Q, 2, 0, kD64);
  gp("ret", "", "", 0xC3, D);
  gp("ret", "i16", "i", 0xC2, D);
  gp("push", "r", "o", 0x50, Q, -1, 0, kD64);
  gp("push", "s8", "i", 0x6A, Q, -1, 0, kD64);
  gp("push", "i", "i", 0x68, Q, -1, 0, kD64);
  gp("push", "r|m", "m", 0xFF, Q, 6, 0, kD64);
  gp("pop", "r", "o", 0x58, Q, -1, 0, kD64);
  gp("pop", "r|m", "m", 0x8F, Q, 0, 0, kD64);
  gp("xchg", "a,r", "-o", 0x90, WDQ, -1, 0, kNotZero);
  gp("xchg", "r,a", "o-", 0x90, WDQ, -1, 0, kNotZero);
  gp("xchg", "r|m,r", "mr", 0x86, B, -1, 0, kLockable);
  gp("xchg", "r|m,r", "mr", 0x87, WDQ, -1, 0, kLockable);
  gp("xchg", "r,m", "rm", 0x86, B, -1, 0, kLockable);
  gp("xchg", "r,m", "rm", 0x87, WDQ, -1, 0, kLockable);
  gp("xadd", "r|m,r", "mr", 0xC0, B, -1, M0F, kLockable);
  gp("xadd", "r|m,r", "mr", 0xC1, WDQ, -1, M0F, kLockable);
  gp("cmpxchg", "r|m,r", "mr", 0xB0, B, -1, M0F, kLockable);
  gp("cmpxchg", "r|m,r", "mr", 0xB1, WDQ, -1, M0F, kLockable);
  gp("popcnt", "r,r|m", "rm", 0xB8, WDQ, -1, M0F, 0, PF3);
  gp("tzcnt", "r,r|m", "rm", 0xBC, WDQ, -1, M0F, 0, PF3);
  gp("lzcnt", "r,r|m", "rm", 0xBD, WDQ, -1, M0F, 0, PF3);
  gp("nop", "", "", 0x90, D);
  gp("pause", "", "", 0x90, D, -1, 0, 0, PF3);
  gp("int3", "", "", 0xCC, D);
  gp("ud2", "", "", 0x0B, D, -1, M0F);
  gp("lfence", "", "", 0xAE, D, 5, M0F, kModrmOnly);
  gp("mfence", "", "", 0xAE, D, 6, M0F, kModrmOnly);
  gp("sfence", "", "", 0xAE, D, 7, M0F, kModrmOnly);
}

void Table::vector_moves() {
  // a load form and a store form: register to register takes whichever encodes shorter (a 2-byte VEX), as GNU as does
  const auto pair = [&](const char* name, uint8_t enc, uint8_t pp, uint8_t load, uint8_t store, uint8_t vw, uint8_t ew, uint8_t sizes) {
    vec(name, "v,v|m", "rm", enc, pp, M0F, load, vw, ew, sizes);
    vec(name, "v|m,v", "mr", enc, pp, M0F, store, vw, ew, sizes);
  };
  pair("vmovups", VE, NP, 0x10, 0x11, 0, 0, XYZ);
  pair("vmovaps", VE, NP, 0x28, 0x29, 0, 0, XYZ);
  pair("vmovupd", VE, P66, 0x10, 0x11, 0, 1, XYZ);
  pair("vmovapd", VE, P66, 0x28, 0x29, 0, 1, XYZ);
  pair("vmovdqu", V, PF3, 0x6F, 0x7F, 0, 0, XY);
  pair("vmovdqa", V, P66, 0x6F, 0x7F, 0, 0, XY);
  pair("vmovdqu8", E, PF2, 0x6F, 0x7F, 0, 0, XYZ);
  pair("vmovdqu16", E, PF2, 0x6F, 0x7F, 0, 1, XYZ);
  pair("vmovdqu32", E, PF3, 0x6F, 0x7F, 0, 0, XYZ);
  pair("vmovdqu64", E, PF3, 0x6F, 0x7F, 0, 1, XYZ);
  pair("vmovdqa32", E, P66, 0x6F, 0x7F, 0, 0, XYZ);
  pair("vmovdqa64", E, P66, 0x6F, 0x7F, 0, 1, XYZ);
  vec("vmovntps", "m,v", "mr", VE, NP, M0F, 0x2B, 0, 0, XYZ, -1, kNoMask);
  vec("vmovntpd", "m,v", "mr", VE, P66, M0F, 0x2B, 0, 1, XYZ, -1, kNoMask);
  vec("vmovntdq", "m,v", "mr", VE, P66, M0F, 0xE7, 0, 0, XYZ, -1, kNoMask);
  vec("vmovntdqa", "v,m", "rm", VE, P66, M38, 0x2A, 0, 0, XYZ, -1, kNoMask);
  // AVX's masked moves: a lane moves where its mask lane's sign bit is set; a masked-off lane is never read or written
  vec("vmaskmovps", "v,v,m", "rvm", V, P66, M38, 0x2C, 0, 0, XY);
  vec("vmaskmovps", "m,v,v", "mvr", V, P66, M38, 0x2E, 0, 0, XY);
  vec("vpmaskmovd", "v,v,m", "rvm", V, P66, M38, 0x8C, 0, 0, XY);
  vec("vpmaskmovd", "m,v,v", "mvr", V, P66, M38, 0x8E, 0, 0, XY);
  for (const auto& [name, pp, ew, load, store] : {std::tuple{"vmovss", PF3, uint8_t{0}, "x,m32", "m32,x"}, std::tuple{"vmovsd", PF2, uint8_t{1}, "x,m64", "m64,x"}}) {
    vec(name, load, "rm", VE, pp, M0F, 0x10, 0, ew, X);
    vec(name, store, "mr", VE, pp, M0F, 0x11, 0, ew, X);
    vec(name, "x,x,x", "rvm", VE, pp, M0F, 0x10, 0, ew, X);
    vec(name, "x,x,x", "mvr", VE, pp, M0F, 0x11, 0, ew, X);
  }
  vec("vmovd", "x,r32|m32", "rm", VE, P66, M0F, 0x6E, 0, 0, X, -1, kNoMask);
  vec("vmovd", "r32|m32,x", "mr", VE, P66, M0F, 0x7E, 0, 0, X, -1, kNoMask);
  vec("vmovq", "x,r64", "rm", VE, P66, M0F, 0x6E, 1, 1, X, -1, kNoMask);
  vec("vmovq", "r64,x", "mr", VE, P66, M0F, 0x7E, 1, 1, X, -1, kNoMask);
  vec("vmovq", "x,m64", "rm", E, P66, M0F, 0x6E, 0, 1, X, -1, kNoMask);  // EVEX loads and stores memory as GNU as does
  vec("vmovq", "x,x|m64", "rm", VE, PF3, M0F, 0x7E, 0, 1, X, -1, kNoMask);
  vec("vmovq", "m64,x", "mr", E, P66, M0F, 0x7E, 0, 1, X, -1, kNoMask);
  vec("vmovq", "x|m64,x", "mr", VE, P66, M0F, 0xD6, 0, 1, X, -1, kNoMask);
  vec("vmovshdup", "v,v|m", "rm", VE, PF3, M0F, 0x16, 0, 0, XYZ);
  vec("vmovsldup", "v,v|m", "rm", VE, PF3, M0F, 0x12, 0, 0, XYZ);
  vec("vmovhlps", "x,x,x", "rvm", VE, NP, M0F, 0x12, 0, 0, X, -1, kNoMask);
  vec("vmovlhps", "x,x,x", "rvm", VE, NP, M0F, 0x16, 0, 0, X, -1, kNoMask);
  vec("vbroadcastss", "v,x|m32", "rm", VE, P66, M38, 0x18, 0, 0, XYZ);
  vec("vbroadcastsd", "v,x|m64", "rm", VE, P66, M38, 0x19, 0, 1, YZ);
  vec("vbroadcastf128", "y,m128", "rm", V, P66, M38, 0x1A, 0, 0, Y);
  vec("vbroadcasti128", "y,m128", "rm", V, P66, M38, 0x5A, 0, 0, Y);
  vec("vbroadcastf32x4", "v,m128", "rm", E, P66, M38, 0x1A, 0, 0, YZ);
  vec("vbroadcasti32x4", "v,m128", "rm", E, P66, M38, 0x5A, 0, 0, YZ);
  vec("vbroadcastf64x4", "z,m256", "rm", E, P66, M38, 0x1B, 0, 1, Z);
  vec("vbroadcasti64x4", "z,m256", "rm", E, P66, M38, 0x5B, 0, 1, Z);
  for (const auto& [name, from_vec, op, from_gpr, gop, w] :
       {std::tuple{"vpbroadcastb", "v,x|m8", 0x78, "v,r32", 0x7A, 0}, std::tuple{"vpbroadcastw", "v,x|m16", 0x79, "v,r32", 0x7B, 0},
        std::tuple{"vpbroadcastd", "v,x|m32", 0x58, "v,r32", 0x7C, 0}, std::tuple{"vpbroadcastq", "v,x|m64", 0x59, "v,r64", 0x7C, 1}}) {
    vec(name, from_vec, "rm", VE, P66, M38, static_cast<uint8_t>(op), 0, static_cast<uint8_t>(w), XYZ);
    vec(name, from_gpr, "rm", E, P66, M38, static_cast<uint8_t>(gop), 0, static_cast<uint8_t>(w), XYZ);
  }
}

void Table::vector_arithmetic() {
  // each operation in four types: packed single (NP, W0), packed double (66, EVEX.W1), scalar single (F3), scalar double (F2)
  const auto four = [&](const std::string& op_name, uint8_t op, bool scalars, bool unary) {
    vec("v" + op_name + "ps", unary ? "v,v|m" : "v,v,v|m", unary ? "rm" : "rvm", VE, NP, M0F, op, 0, 0, XYZ);
    vec("v" + op_name + "pd", unary ? "v,v|m" : "v,v,v|m", unary ? "rm" : "rvm", VE, P66, M0F, op, 0, 1, XYZ);
    if (!scalars) return;
    vec("v" + op_name + "ss", "x,x,x|m32", "rvm", VE, PF3, M0F, op, 0, 0, X);
    vec("v" + op_name + "sd", "x,x,x|m64", "rvm", VE, PF2, M0F, op, 0, 1, X);
  };
  for (const auto& [name, op] : {std::pair{"add", 0x58}, {"mul", 0x59}, {"sub", 0x5C}, {"min", 0x5D}, {"div", 0x5E}, {"max", 0x5F}})
    four(name, static_cast<uint8_t>(op), true, false);
  four("sqrt", 0x51, false, true);
  vec("vsqrtss", "x,x,x|m32", "rvm", VE, PF3, M0F, 0x51, 0, 0, X);
  vec("vsqrtsd", "x,x,x|m64", "rvm", VE, PF2, M0F, 0x51, 0, 1, X);
  for (const auto& [name, op] : {std::pair{"and", 0x54}, {"andn", 0x55}, {"or", 0x56}, {"xor", 0x57}, {"unpckl", 0x14}, {"unpckh", 0x15}})
    four(name, static_cast<uint8_t>(op), false, false);
  // fused multiply-add: 0F38, W selects single/double in VEX too; the scalar form is the packed opcode + 1
  for (const auto& [kind, add] : {std::pair{"fmadd", 0}, {"fmsub", 2}, {"fnmadd", 4}, {"fnmsub", 6}})
    for (const auto& [order, base] : {std::pair{"132", 0x98}, {"213", 0xA8}, {"231", 0xB8}}) {
      const std::string n = std::string("v") + kind + order;
      const auto op = static_cast<uint8_t>(base + add);
      vec(n + "ps", "v,v,v|m", "rvm", VE, P66, M38, op, 0, 0, XYZ);
      vec(n + "pd", "v,v,v|m", "rvm", VE, P66, M38, op, 1, 1, XYZ);
      vec(n + "ss", "x,x,x|m32", "rvm", VE, P66, M38, op + 1, 0, 0, X);
      vec(n + "sd", "x,x,x|m64", "rvm", VE, P66, M38, op + 1, 1, 1, X);
    }
  // compares: VEX writes a vector of all-ones/zero lanes, EVEX a mask register
  for (const auto& [t, pp, w, vops, kops, sizes] :
       {std::tuple{"ps", NP, 0, "v,v,v|m,i8", "k,v,v|m,i8", XYZ}, std::tuple{"pd", P66, 1, "v,v,v|m,i8", "k,v,v|m,i8", XYZ},
        std::tuple{"ss", PF3, 0, "x,x,x|m32,i8", "k,x,x|m32,i8", X}, std::tuple{"sd", PF2, 1, "x,x,x|m64,i8", "k,x,x|m64,i8", X}}) {
    vec(std::string("vcmp") + t, vops, "rvmi", V, pp, M0F, 0xC2, 0, 0, sizes);
    vec(std::string("vcmp") + t, kops, "rvmi", E, pp, M0F, 0xC2, 0, static_cast<uint8_t>(w), sizes);
  }
  vec("vucomiss", "x,x|m32", "rm", VE, NP, M0F, 0x2E, 0, 0, X, -1, kNoMask);
  vec("vucomisd", "x,x|m64", "rm", VE, P66, M0F, 0x2E, 0, 1, X, -1, kNoMask);
  vec("vcomiss", "x,x|m32", "rm", VE, NP, M0F, 0x2F, 0, 0, X, -1, kNoMask);
  vec("vcomisd", "x,x|m64", "rm", VE, P66, M0F, 0x2F, 0, 1, X, -1, kNoMask);
  vec("vblendvps", "v,v,v|m,v", "rvml", V, P66, M3A, 0x4A, 0, 0, XY);
  vec("vblendvpd", "v,v,v|m,v", "rvml", V, P66, M3A, 0x4B, 0, 0, XY);
  vec("vpblendvb", "v,v,v|m,v", "rvml", V, P66, M3A, 0x4C, 0, 0, XY);
  vec("vblendps", "v,v,v|m,i8", "rvmi", V, P66, M3A, 0x0C, 0, 0, XY);
  vec("vblendpd", "v,v,v|m,i8", "rvmi", V, P66, M3A, 0x0D, 0, 0, XY);
  vec("vpblendd", "v,v,v|m,i8", "rvmi", V, P66, M3A, 0x02, 0, 0, XY);
  for (const auto& [name, op, w] : {std::tuple{"vblendmps", 0x65, 0}, {"vblendmpd", 0x65, 1}, {"vpblendmd", 0x64, 0}, {"vpblendmq", 0x64, 1},
                                    {"vpblendmb", 0x66, 0}, {"vpblendmw", 0x66, 1}})
    vec(name, "v,v,v|m", "rvm", E, P66, M38, static_cast<uint8_t>(op), 0, static_cast<uint8_t>(w), XYZ);
  vec("vroundps", "v,v|m,i8", "rmi", V, P66, M3A, 0x08, 0, 0, XY);
  vec("vroundpd", "v,v|m,i8", "rmi", V, P66, M3A, 0x09, 0, 0, XY);
  vec("vroundss", "x,x,x|m32,i8", "rvmi", V, P66, M3A, 0x0A, 0, 0, X);
  vec("vroundsd", "x,x,x|m64,i8", "rvmi", V, P66, M3A, 0x0B, 0, 0, X);
  vec("vrndscaleps", "v,v|m,i8", "rmi", E, P66, M3A, 0x08, 0, 0, XYZ);
  vec("vrndscalepd", "v,v|m,i8", "rmi", E, P66, M3A, 0x09, 0, 1, XYZ);
  vec("vrndscaless", "x,x,x|m32,i8", "rvmi", E, P66, M3A, 0x0A, 0, 0, X);
  vec("vrndscalesd", "x,x,x|m64,i8", "rvmi", E, P66, M3A, 0x0B, 0, 1, X);
}

void Table::vector_integer() {
  // binary operations over vector lanes, in 66 0F / 66 0F38; EVEX.W1 for the quadword ones
  const struct {
    const char* name;
    uint8_t map, op, evex_w;
  } binary[] = {
      {"vpaddb", M0F, 0xFC, 0},      {"vpaddw", M0F, 0xFD, 0},      {"vpaddd", M0F, 0xFE, 0},      {"vpaddq", M0F, 0xD4, 1},
      {"vpsubb", M0F, 0xF8, 0},      {"vpsubw", M0F, 0xF9, 0},      {"vpsubd", M0F, 0xFA, 0},      {"vpsubq", M0F, 0xFB, 1},
      {"vpmullw", M0F, 0xD5, 0},     {"vpmuludq", M0F, 0xF4, 1},    {"vpmulld", M38, 0x40, 0},     {"vpmuldq", M38, 0x28, 1},
      {"vpunpcklbw", M0F, 0x60, 0},  {"vpunpcklwd", M0F, 0x61, 0},  {"vpunpckldq", M0F, 0x62, 0},  {"vpunpcklqdq", M0F, 0x6C, 1},
      {"vpunpckhbw", M0F, 0x68, 0},  {"vpunpckhwd", M0F, 0x69, 0},  {"vpunpckhdq", M0F, 0x6A, 0},  {"vpunpckhqdq", M0F, 0x6D, 1},
      {"vpacksswb", M0F, 0x63, 0},   {"vpackssdw", M0F, 0x6B, 0},   {"vpackuswb", M0F, 0x67, 0},   {"vpackusdw", M38, 0x2B, 0},
      {"vpmaxsb", M38, 0x3C, 0},     {"vpmaxsw", M0F, 0xEE, 0},     {"vpmaxsd", M38, 0x3D, 0},     {"vpmaxub", M0F, 0xDE, 0},
      {"vpmaxuw", M38, 0x3E, 0},     {"vpmaxud", M38, 0x3F, 0},     {"vpminsb", M38, 0x38, 0},     {"vpminsw", M0F, 0xEA, 0},
      {"vpminsd", M38, 0x39, 0},     {"vpminub", M0F, 0xDA, 0},     {"vpminuw", M38, 0x3A, 0},     {"vpminud", M38, 0x3B, 0},
      {"vpshufb", M38, 0x00, 0},
  };
  for (const auto& b : binary) vec(b.name, "v,v,v|m", "rvm", VE, P66, b.map, b.op, 0, b.evex_w, XYZ);
  // AVX-512 only: the quadword forms AVX2 lacks, and the logic ops by element size (which write masks select by)
  const struct {
    const char* name;
    uint8_t map, op, w;
  } evex_binary[] = {
      {"vpmullq", M38, 0x40, 1}, {"vpmaxsq", M38, 0x3D, 1}, {"vpmaxuq", M38, 0x3F, 1}, {"vpminsq", M38, 0x39, 1}, {"vpminuq", M38, 0x3B, 1},
      {"vpandd", M0F, 0xDB, 0},  {"vpandq", M0F, 0xDB, 1},  {"vpandnd", M0F, 0xDF, 0}, {"vpandnq", M0F, 0xDF, 1}, {"vpord", M0F, 0xEB, 0},
      {"vporq", M0F, 0xEB, 1},   {"vpxord", M0F, 0xEF, 0},  {"vpxorq", M0F, 0xEF, 1},  {"vpsravq", M38, 0x46, 1}, {"vpsllvw", M38, 0x12, 1},
      {"vpsrlvw", M38, 0x10, 1}, {"vpsravw", M38, 0x11, 1},
  };
  for (const auto& b : evex_binary) vec(b.name, "v,v,v|m", "rvm", E, P66, b.map, b.op, 0, b.w, XYZ);
  for (const auto& [name, op] : {std::pair{"vpand", 0xDB}, {"vpandn", 0xDF}, {"vpor", 0xEB}, {"vpxor", 0xEF}})
    vec(name, "v,v,v|m", "rvm", V, P66, M0F, static_cast<uint8_t>(op), 0, 0, XY);
  // variable shifts: W picks dword/qword in VEX as well
  for (const auto& [name, op, w] : {std::tuple{"vpsllvd", 0x47, 0}, {"vpsllvq", 0x47, 1}, {"vpsrlvd", 0x45, 0}, {"vpsrlvq", 0x45, 1}, {"vpsravd", 0x46, 0}})
    vec(name, "v,v,v|m", "rvm", VE, P66, M38, static_cast<uint8_t>(op), static_cast<uint8_t>(w), static_cast<uint8_t>(w), XYZ);
  // shifts by an immediate: the destination is vvvv, the /digit picks the shift; VEX shifts registers only
  const struct {
    const char* name;
    uint8_t op;
    int ext;
    uint8_t evex_w, flags;
  } imm_shifts[] = {{"vpsrlw", 0x71, 2, 0, 0}, {"vpsraw", 0x71, 4, 0, 0}, {"vpsllw", 0x71, 6, 0, 0},       {"vpsrld", 0x72, 2, 0, 0},
                    {"vpsrad", 0x72, 4, 0, 0}, {"vpslld", 0x72, 6, 0, 0}, {"vpsrlq", 0x73, 2, 1, 0},       {"vpsllq", 0x73, 6, 1, 0},
                    {"vpsrldq", 0x73, 3, 0, kNoMask}, {"vpslldq", 0x73, 7, 0, kNoMask}};
  for (const auto& s : imm_shifts) {
    vec(s.name, "v,v,i8", "vmi", V, P66, M0F, s.op, 0, 0, XY, s.ext);
    vec(s.name, "v,v|m,i8", "vmi", E, P66, M0F, s.op, 0, s.evex_w, XYZ, s.ext, s.flags);
  }
  vec("vpsraq", "v,v|m,i8", "vmi", E, P66, M0F, 0x72, 0, 1, XYZ, 4);
  for (const auto& [name, map, op, w] : {std::tuple{"vpcmpeqb", M0F, 0x74, 0}, {"vpcmpeqw", M0F, 0x75, 0}, {"vpcmpeqd", M0F, 0x76, 0}, {"vpcmpeqq", M38, 0x29, 1},
                                         {"vpcmpgtb", M0F, 0x64, 0}, {"vpcmpgtw", M0F, 0x65, 0}, {"vpcmpgtd", M0F, 0x66, 0}, {"vpcmpgtq", M38, 0x37, 1}}) {
    vec(name, "v,v,v|m", "rvm", V, P66, map, static_cast<uint8_t>(op), 0, 0, XY);
    vec(name, "k,v,v|m", "rvm", E, P66, map, static_cast<uint8_t>(op), 0, static_cast<uint8_t>(w), XYZ);
  }
  for (const auto& [name, op, w] : {std::tuple{"vpcmpb", 0x3F, 0}, {"vpcmpub", 0x3E, 0}, {"vpcmpw", 0x3F, 1}, {"vpcmpuw", 0x3E, 1}, {"vpcmpd", 0x1F, 0},
                                    {"vpcmpud", 0x1E, 0}, {"vpcmpq", 0x1F, 1}, {"vpcmpuq", 0x1E, 1}})
    vec(name, "k,v,v|m,i8", "rvmi", E, P66, M3A, static_cast<uint8_t>(op), 0, static_cast<uint8_t>(w), XYZ);
  for (const auto& [name, pp, op, w] : {std::tuple{"vptestmb", P66, 0x26, 0}, {"vptestmw", P66, 0x26, 1}, {"vptestmd", P66, 0x27, 0}, {"vptestmq", P66, 0x27, 1},
                                        {"vptestnmb", PF3, 0x26, 0}, {"vptestnmw", PF3, 0x26, 1}, {"vptestnmd", PF3, 0x27, 0}, {"vptestnmq", PF3, 0x27, 1}})
    vec(name, "k,v,v|m", "rvm", E, pp, M38, static_cast<uint8_t>(op), 0, static_cast<uint8_t>(w), XYZ);
  vec("vpternlogd", "v,v,v|m,i8", "rvmi", E, P66, M3A, 0x25, 0, 0, XYZ);
  vec("vpternlogq", "v,v,v|m,i8", "rvmi", E, P66, M3A, 0x25, 0, 1, XYZ);
  vec("vpalignr", "v,v,v|m,i8", "rvmi", VE, P66, M3A, 0x0F, 0, 0, XYZ);
  for (const auto& [name, op] : {std::pair{"vpabsb", 0x1C}, {"vpabsw", 0x1D}, {"vpabsd", 0x1E}})
    vec(name, "v,v|m", "rm", VE, P66, M38, static_cast<uint8_t>(op), 0, 0, XYZ);
  vec("vpabsq", "v,v|m", "rm", E, P66, M38, 0x1F, 0, 1, XYZ);
  // widening moves (a half, quarter or eighth of the destination's width in) and AVX-512's narrowing ones (truncating,
  // signed- and unsigned-saturating), one opcode apart per element pair
  const struct {
    const char* pair;
    uint8_t delta;
    const char* widen;
    const char* narrow;
  } widths[] = {{"bw", 0, "v,vh|mh", "vh|mh,v"}, {"bd", 1, "v,vq|mq", "vq|mq,v"}, {"bq", 2, "v,ve|me", "ve|me,v"},
                {"wd", 3, "v,vh|mh", "vh|mh,v"}, {"wq", 4, "v,vq|mq", "vq|mq,v"}, {"dq", 5, "v,vh|mh", "vh|mh,v"}};
  const char* narrowed[] = {"wb", "db", "qb", "dw", "qw", "qd"};  // the same slots, named by source then destination
  for (const auto& w : widths) {
    vec(std::string("vpmovsx") + w.pair, w.widen, "rm", VE, P66, M38, 0x20 + w.delta, 0, 0, XYZ);
    vec(std::string("vpmovzx") + w.pair, w.widen, "rm", VE, P66, M38, 0x30 + w.delta, 0, 0, XYZ);
    const std::string n = narrowed[w.delta];
    vec("vpmov" + n, w.narrow, "mr", E, PF3, M38, 0x30 + w.delta, 0, 0, XYZ);
    vec("vpmovs" + n, w.narrow, "mr", E, PF3, M38, 0x20 + w.delta, 0, 0, XYZ);
    vec("vpmovus" + n, w.narrow, "mr", E, PF3, M38, 0x10 + w.delta, 0, 0, XYZ);
  }
  vec("vpshufd", "v,v|m,i8", "rmi", VE, P66, M0F, 0x70, 0, 0, XYZ);
  vec("vpshufhw", "v,v|m,i8", "rmi", VE, PF3, M0F, 0x70, 0, 0, XYZ);
  vec("vpshuflw", "v,v|m,i8", "rmi", VE, PF2, M0F, 0x70, 0, 0, XYZ);
  vec("vpermd", "v,v,v|m", "rvm", VE, P66, M38, 0x36, 0, 0, YZ);
  vec("vpermps", "v,v,v|m", "rvm", VE, P66, M38, 0x16, 0, 0, YZ);
  vec("vpermq", "v,v|m,i8", "rmi", VE, P66, M3A, 0x00, 1, 1, YZ);
  vec("vpermpd", "v,v|m,i8", "rmi", VE, P66, M3A, 0x01, 1, 1, YZ);
  vec("vpermq", "v,v,v|m", "rvm", E, P66, M38, 0x36, 0, 1, YZ);
  vec("vpermpd", "v,v,v|m", "rvm", E, P66, M38, 0x16, 0, 1, YZ);
  vec("vpermilps", "v,v|m,i8", "rmi", VE, P66, M3A, 0x04, 0, 0, XYZ);
  vec("vpermilps", "v,v,v|m", "rvm", VE, P66, M38, 0x0C, 0, 0, XYZ);
  vec("vpermilpd", "v,v|m,i8", "rmi", VE, P66, M3A, 0x05, 0, 1, XYZ);
  vec("vpermilpd", "v,v,v|m", "rvm", VE, P66, M38, 0x0D, 0, 1, XYZ);
  vec("vshufps", "v,v,v|m,i8", "rvmi", VE, NP, M0F, 0xC6, 0, 0, XYZ);
  vec("vshufpd", "v,v,v|m,i8", "rvmi", VE, P66, M0F, 0xC6, 0, 1, XYZ);
  for (const auto& [name, op, w] : {std::tuple{"vshuff32x4", 0x23, 0}, {"vshuff64x2", 0x23, 1}, {"vshufi32x4", 0x43, 0}, {"vshufi64x2", 0x43, 1}})
    vec(name, "v,v,v|m,i8", "rvmi", E, P66, M3A, static_cast<uint8_t>(op), 0, static_cast<uint8_t>(w), YZ);
}

void Table::vector_conversions() {
  // integer <-> scalar float: the general register's width is W
  for (const auto& [name, pp, op, enc] : {std::tuple{"vcvtsi2ss", PF3, 0x2A, VE}, {"vcvtsi2sd", PF2, 0x2A, VE}, {"vcvtusi2ss", PF3, 0x7B, E},
                                          {"vcvtusi2sd", PF2, 0x7B, E}}) {
    vec(name, "x,x,r32|m32", "rvm", enc, pp, M0F, static_cast<uint8_t>(op), 0, 0, X, -1, kNoMask);
    vec(name, "x,x,r64|m64", "rvm", enc, pp, M0F, static_cast<uint8_t>(op), 1, 1, X, -1, kNoMask);
  }
  for (const auto& [name, pp, op, enc, ops32, ops64] :
       {std::tuple{"vcvttss2si", PF3, 0x2C, VE, "r32,x|m32", "r64,x|m32"}, {"vcvttsd2si", PF2, 0x2C, VE, "r32,x|m64", "r64,x|m64"},
        {"vcvtss2si", PF3, 0x2D, VE, "r32,x|m32", "r64,x|m32"}, {"vcvtsd2si", PF2, 0x2D, VE, "r32,x|m64", "r64,x|m64"},
        {"vcvttss2usi", PF3, 0x78, E, "r32,x|m32", "r64,x|m32"}, {"vcvttsd2usi", PF2, 0x78, E, "r32,x|m64", "r64,x|m64"},
        {"vcvtss2usi", PF3, 0x79, E, "r32,x|m32", "r64,x|m32"}, {"vcvtsd2usi", PF2, 0x79, E, "r32,x|m64", "r64,x|m64"}}) {
    vec(name, ops32, "rm", enc, pp, M0F, static_cast<uint8_t>(op), 0, 0, X, -1, kNoMask);
    vec(name, ops64, "rm", enc, pp, M0F, static_cast<uint8_t>(op), 1, 1, X, -1, kNoMask);
  }
  vec("vcvtss2sd", "x,x,x|m32", "rvm", VE, PF3, M0F, 0x5A, 0, 0, X);
  vec("vcvtsd2ss", "x,x,x|m64", "rvm", VE, PF2, M0F, 0x5A, 0, 1, X);
  // packed: "same" keeps the width, "widen" reads half of it (a ymm from an xmm), "narrow" writes half
  constexpr const char* same = "v,v|m";
  constexpr const char* widen = "v,vh|mh";
  constexpr const char* narrow = "vh,v|m";
  const struct {
    const char* name;
    const char* ops;
    uint8_t enc, pp, op, evex_w;
  } packed[] = {
      {"vcvtdq2ps", same, VE, NP, 0x5B, 0},    {"vcvttps2dq", same, VE, PF3, 0x5B, 0},  {"vcvtps2dq", same, VE, P66, 0x5B, 0},
      {"vcvtps2pd", widen, VE, NP, 0x5A, 0},   {"vcvtpd2ps", narrow, VE, P66, 0x5A, 1}, {"vcvtdq2pd", widen, VE, PF3, 0xE6, 0},
      {"vcvttpd2dq", narrow, VE, P66, 0xE6, 1}, {"vcvtpd2dq", narrow, VE, PF2, 0xE6, 1},
      {"vcvtudq2ps", same, E, PF2, 0x7A, 0},   {"vcvtudq2pd", widen, E, PF3, 0x7A, 0},  {"vcvtuqq2pd", same, E, PF3, 0x7A, 1},
      {"vcvtuqq2ps", narrow, E, PF2, 0x7A, 1}, {"vcvttps2udq", same, E, NP, 0x78, 0},   {"vcvttpd2udq", narrow, E, NP, 0x78, 1},
      {"vcvtps2udq", same, E, NP, 0x79, 0},    {"vcvtpd2udq", narrow, E, NP, 0x79, 1},  {"vcvtqq2pd", same, E, PF3, 0xE6, 1},
      {"vcvtqq2ps", narrow, E, NP, 0x5B, 1},   {"vcvttpd2qq", same, E, P66, 0x7A, 1},   {"vcvttps2qq", widen, E, P66, 0x7A, 0},
      {"vcvtpd2qq", same, E, P66, 0x7B, 1},    {"vcvtps2qq", widen, E, P66, 0x7B, 0},   {"vcvttpd2uqq", same, E, P66, 0x78, 1},
      {"vcvttps2uqq", widen, E, P66, 0x78, 0}, {"vcvtpd2uqq", same, E, P66, 0x79, 1},   {"vcvtps2uqq", widen, E, P66, 0x79, 0},
  };
  for (const auto& c : packed) vec(c.name, c.ops, "rm", c.enc, c.pp, M0F, c.op, 0, c.evex_w, XYZ);
  vec("vcvtph2ps", widen, "rm", VE, P66, M38, 0x13, 0, 0, XYZ);
  vec("vcvtps2ph", "vh|mh,v,i8", "mri", VE, P66, M3A, 0x1D, 0, 0, XYZ);
}

void Table::vector_lanes() {
  vec("vextractf128", "x|m128,y,i8", "mri", V, P66, M3A, 0x19, 0, 0, Y);
  vec("vextracti128", "x|m128,y,i8", "mri", V, P66, M3A, 0x39, 0, 0, Y);
  vec("vinsertf128", "y,y,x|m128,i8", "rvmi", V, P66, M3A, 0x18, 0, 0, Y);
  vec("vinserti128", "y,y,x|m128,i8", "rvmi", V, P66, M3A, 0x38, 0, 0, Y);
  // AVX-512 lane moves: a 128-bit lane of a ymm or zmm, or a 256-bit half of a zmm; W is the element size masks act on
  for (const auto& [t, base] : {std::pair{"f", 0x18}, {"i", 0x38}}) {
    const auto op = static_cast<uint8_t>(base);
    const std::string ext = std::string("vextract") + t, ins = std::string("vinsert") + t;
    vec(ext + "32x4", "x|m128,v,i8", "mri", E, P66, M3A, op + 1, 0, 0, YZ);
    vec(ext + "64x2", "x|m128,v,i8", "mri", E, P66, M3A, op + 1, 0, 1, YZ);
    vec(ext + "32x8", "y|m256,z,i8", "mri", E, P66, M3A, op + 3, 0, 0, Z);
    vec(ext + "64x4", "y|m256,z,i8", "mri", E, P66, M3A, op + 3, 0, 1, Z);
    vec(ins + "32x4", "v,v,x|m128,i8", "rvmi", E, P66, M3A, op, 0, 0, YZ);
    vec(ins + "64x2", "v,v,x|m128,i8", "rvmi", E, P66, M3A, op, 0, 1, YZ);
    vec(ins + "32x8", "z,z,y|m256,i8", "rvmi", E, P66, M3A, op + 2, 0, 0, Z);
    vec(ins + "64x4", "z,z,y|m256,i8", "rvmi", E, P66, M3A, op + 2, 0, 1, Z);
  }
  vec("vinsertps", "x,x,x|m32,i8", "rvmi", VE, P66, M3A, 0x21, 0, 0, X, -1, kNoMask);
  vec("vextractps", "r32|m32,x,i8", "mri", VE, P66, M3A, 0x17, 0, 0, X, -1, kNoMask);
  vec("vpextrb", "r32|m8,x,i8", "mri", VE, P66, M3A, 0x14, 0, 0, X, -1, kNoMask);
  vec("vpextrw", "r32,x,i8", "rmi", VE, P66, M0F, 0xC5, 0, 0, X, -1, kNoMask);
  vec("vpextrw", "r32|m16,x,i8", "mri", VE, P66, M3A, 0x15, 0, 0, X, -1, kNoMask);
  vec("vpextrd", "r32|m32,x,i8", "mri", VE, P66, M3A, 0x16, 0, 0, X, -1, kNoMask);
  vec("vpextrq", "r64|m64,x,i8", "mri", VE, P66, M3A, 0x16, 1, 1, X, -1, kNoMask);
  vec("vpinsrb", "x,x,r32|m8,i8", "rvmi", VE, P66, M3A, 0x20, 0, 0, X, -1, kNoMask);
  vec("vpinsrw", "x,x,r32|m16,i8", "rvmi", VE, P66, M0F, 0xC4, 0, 0, X, -1, kNoMask);
  vec("vpinsrd", "x,x,r32|m32,i8", "rvmi", VE, P66, M3A, 0x22, 0, 0, X, -1, kNoMask);
  vec("vpinsrq", "x,x,r64|m64,i8", "rvmi", VE, P66, M3A, 0x22, 1, 1, X, -1, kNoMask);
  vec("vmovmskps", "r32,v", "rm", V, NP, M0F, 0x50, 0, 0, XY);
  vec("vmovmskpd", "r32,v", "rm", V, P66, M0F, 0x50, 0, 0, XY);
  vec("vpmovmskb", "r32,v", "rm", V, P66, M0F, 0xD7, 0, 0, XY);
  // vector <-> mask register, by element size
  for (const auto& [t, op, w] : {std::tuple{"b", 0x28, 0}, {"w", 0x28, 1}, {"d", 0x38, 0}, {"q", 0x38, 1}}) {
    vec(std::string("vpmovm2") + t, "v,k", "rm", E, PF3, M38, static_cast<uint8_t>(op), 0, static_cast<uint8_t>(w), XYZ, -1, kNoMask);
    vec(std::string("vpmov") + t + "2m", "k,v", "rm", E, PF3, M38, static_cast<uint8_t>(op + 1), 0, static_cast<uint8_t>(w), XYZ, -1, kNoMask);
  }
  vec("vzeroupper", "", "", V, NP, M0F, 0x77, 0, 0, X);
  vec("vzeroall", "", "", V, NP, M0F, 0x77, 0, 0, Y);
}

void Table::masks() {
  // the mask instructions are VEX-encoded; the operand size is the prefix and W: b 66.W0, w NP.W0, d 66.W1, q NP.W1
  // (kmov from or to a general register: b and w as above with r32, d F2.W0, q F2.W1 with r64)
  const struct {
    char t;
    uint8_t pp, w;
    const char* load;
    const char* store;
    const char* to_k;
    const char* from_k;
    uint8_t gpr_pp;
  } sizes[] = {{'b', P66, 0, "k,k|m8", "m8,k", "k,r32", "r32,k", P66},
               {'w', NP, 0, "k,k|m16", "m16,k", "k,r32", "r32,k", NP},
               {'d', P66, 1, "k,k|m32", "m32,k", "k,r32", "r32,k", PF2},
               {'q', NP, 1, "k,k|m64", "m64,k", "k,r64", "r64,k", PF2}};
  for (const auto& s : sizes) {
    const std::string t(1, s.t);
    const uint8_t gpr_w = s.t == 'q' ? 1 : 0;
    vec("kmov" + t, s.load, "rm", V, s.pp, M0F, 0x90, s.w, 0, X);
    vec("kmov" + t, s.store, "mr", V, s.pp, M0F, 0x91, s.w, 0, X);
    vec("kmov" + t, s.to_k, "rm", V, s.gpr_pp, M0F, 0x92, gpr_w, 0, X);
    vec("kmov" + t, s.from_k, "rm", V, s.gpr_pp, M0F, 0x93, gpr_w, 0, X);
    vec("knot" + t, "k,k", "rm", V, s.pp, M0F, 0x44, s.w, 0, X);
    vec("kortest" + t, "k,k", "rm", V, s.pp, M0F, 0x98, s.w, 0, X);
    vec("ktest" + t, "k,k", "rm", V, s.pp, M0F, 0x99, s.w, 0, X);
    for (const auto& [name, op] : {std::pair{"kand", 0x41}, {"kandn", 0x42}, {"kor", 0x45}, {"kxnor", 0x46}, {"kxor", 0x47}, {"kadd", 0x4A}})
      vec(name + t, "k,k,k", "rvm", V, s.pp, M0F, static_cast<uint8_t>(op), s.w, 0, Y);
  }
  // shifts: 66 0F3A, opcode by direction and dword-or-wider, W by the smaller size of each pair
  for (const auto& [t, op, w] : {std::tuple{"b", 0x30, 0}, {"w", 0x30, 1}, {"d", 0x31, 0}, {"q", 0x31, 1}}) {
    vec(std::string("kshiftr") + t, "k,k,i8", "rmi", V, P66, M3A, static_cast<uint8_t>(op), static_cast<uint8_t>(w), 0, X);
    vec(std::string("kshiftl") + t, "k,k,i8", "rmi", V, P66, M3A, static_cast<uint8_t>(op + 2), static_cast<uint8_t>(w), 0, X);
  }
  vec("kunpckbw", "k,k,k", "rvm", V, P66, M0F, 0x4B, 0, 0, Y);
  vec("kunpckwd", "k,k,k", "rvm", V, NP, M0F, 0x4B, 0, 0, Y);
  vec("kunpckdq", "k,k,k", "rvm", V, NP, M0F, 0x4B, 1, 0, Y);
}

const Table& table() {
  static const Table t;  // built once, read-only afterwards
  return t;
}

}  // namespace

std::span<const Form> forms_of(std::string_view mnemonic) { return table().find(mnemonic); }

std::vector<std::string_view> all_mnemonics() { return table().names(); }

}  // namespace th::x86::detail
