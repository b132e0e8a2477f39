//! GELU (exact form) on dense f32 runs at AVX-512, by table.
//!
//! The generic kernel (`float32::gelu`: one exponential, a division and a
//! 12-term polynomial, about 45 vector operations per 16 lanes) could not
//! reach the time of PyTorch's CPU `gelu`, a short piecewise polynomial
//! without a relative bound in the negative tail. This one keeps a relative
//! bound and needs no exponential:
//!
//! * `q(a) = Phi(-a)` (the normal CDF, `a = |x|`) on `[0, 6]` is one
//!   polynomial of degree 6 per interval of width 3/16 (32 intervals). Its
//!   7 coefficients per interval are 7 tables of 32 floats, two AVX-512
//!   registers each, looked up with one `vpermt2ps` per coefficient;
//! * the interval's index comes from `a / h` rounded to an integer with
//!   the `1.5 * 2^23` trick (the low bits of the sum are the index), and
//!   the polynomial's variable is `d = a - c_k` against the interval's
//!   centre `c_k = (k + 1/2) h`, computed exactly (`c_k` is a multiple of
//!   3/32 and `a` is within `h` of it). A variable taken from the rounded
//!   `a / h` instead was off by up to 2^-20 intervals, which the tail's
//!   slope (`q'/q = -a`) turned into 17 ulps;
//! * `gelu(x) = x q(a)` below 0 and `x (1 - q(a))` above, so both sides
//!   keep their relative error (no cancellation in `1 + erf`);
//! * beyond `a = 6`, `1 - q` rounds to 1 (the positive side clamps `a`),
//!   and the negative side below -6 is left to the generic kernel: each
//!   block of [`BLOCK`] elements is scanned first, and a block holding
//!   such an input runs `float32::gelu` instead. (Per vector, with the
//!   fallback inlined in the table loop, inputs of scale 2 ran slower than
//!   the generic kernel: the branch mispredicted and the tables were
//!   reloaded.)
//!
//! Error: 2.12 ulps at most over every third f32 in `[-8, 8]` against an
//! f64 reference (2.5 asserted by the tests below over their sweep);
//! blocks that fall back give `float32::gelu`'s results bit for bit.
//!
//! Speed: less than half `float32::gelu`'s time on standard normal inputs,
//! and below PyTorch's; inputs of a larger scale fall back more often (a
//! block of 64 holds an input below -6 with probability 1 - (1 - Phi(-2))^64
//! = 0.77 at scale 3), and where nearly every block falls back the scan makes
//! it slower than the generic kernel alone (Note [gelu table] in
//! `bench/results/ops-why.md`).

use std::arch::x86_64::{
    __m512, _mm512_abs_ps, _mm512_add_ps, _mm512_castps_si512, _mm512_cmp_ps_mask, _mm512_fmadd_ps,
    _mm512_loadu_ps, _mm512_mask_sub_ps, _mm512_min_ps, _mm512_mul_ps, _mm512_permutex2var_ps,
    _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps, _mm512_sub_ps, _CMP_GT_OQ, _CMP_LT_OQ,
};

use super::float32;

/// The table's end: `q(6) = 9.9e-10`, so `1 - q` is 1 in f32 from here on.
const A: f32 = 6.0;
/// Intervals of the table (two 16-lane registers per coefficient).
const N: usize = 32;
/// Their width, 3/16: exact, and so is every centre `(k + 1/2) h`.
const H: f32 = A / N as f32;
/// `1 / h` rounded: it only picks the interval.
const INV_H: f32 = N as f32 / A;
/// `a` is clamped here: just below `A`, so that its index rounds to 31.
const A_MAX: f32 = A * (1.0 - 1.0 / 1_048_576.0);
/// `1.5 * 2^23`: added to a value in `[-1/2, 32)`, the sum's low mantissa
/// bits are the value rounded to an integer.
const ROUND: f32 = 12_582_912.0;
/// Elements per block: each block is scanned for inputs below `-A_MAX`
/// before it runs the table or the generic kernel. 64 measured fastest of
/// 32, 64, 128 and 256 (standard normal inputs; 256 also at scale 2).
const BLOCK: usize = 64;

/// `GELU_TABLE[j][k]`: coefficient `j` of `q(c_k + d)`, `d` in
/// `[-h/2, h/2]`, fitted by `tests/fixtures/vmath_fit.py` (5.2e-8 relative
/// with these f32 coefficients).
#[allow(clippy::excessive_precision)]
const GELU_TABLE: [[f32; N]; 7] = [
    [
        0.46265387535095215,
        0.38925933837890625,
        0.3196241855621338,
        0.25583162903785706,
        0.19940456748008728,
        0.15121179819107056,
        0.11146954447031021,
        0.07982495427131653,
        0.05549601837992668,
        0.03743581101298332,
        0.024490904062986374,
        0.015532074496150017,
        0.009545481763780117,
        0.0056828404776751995,
        0.00327645568177104,
        0.0018289453582838178,
        0.0009882197482511401,
        0.000516740488819778,
        0.00026144288131035864,
        0.00012796588998753577,
        6.058422150090337e-05,
        2.774049607978668e-05,
        1.2283024261705577e-05,
        5.258778401184827e-06,
        2.176754605898168e-06,
        8.710427437108592e-07,
        3.3692941769913887e-07,
        1.2597223530974588e-07,
        4.5521556302219324e-08,
        1.589783948929835e-08,
        5.3655271337049726e-09,
        1.7499137694443334e-09,
    ],
    [
        -0.39719295501708984,
        -0.3834717571735382,
        -0.3574349880218506,
        -0.3216566741466522,
        -0.2794601619243622,
        -0.2344115823507309,
        -0.18983228504657745,
        -0.14842016994953156,
        -0.1120334193110466,
        -0.08164584636688232,
        -0.05744502693414688,
        -0.03902138024568558,
        -0.025590846315026283,
        -0.01620311476290226,
        -0.009904765523970127,
        -0.005845500621944666,
        -0.003330665873363614,
        -0.0018321973038837314,
        -0.0009730726596899331,
        -0.0004989420995116234,
        -0.0002469942264724523,
        -0.00011804710811702535,
        -5.446979048429057e-05,
        -2.4265425963676535e-05,
        -1.0436429874971509e-05,
        -4.333589913585456e-06,
        -1.7373029095324455e-06,
        -6.72411431423825e-07,
        -2.512618095806829e-07,
        -9.064622474852513e-08,
        -3.157219552463175e-08,
        -1.0616751922043477e-08,
    ],
    [
        0.018618488684296608,
        0.05391719192266464,
        0.08376158773899078,
        0.10555435717105865,
        0.11789117008447647,
        0.12086956948041916,
        0.11568132787942886,
        0.10435494035482407,
        0.08927823603153229,
        0.07271439582109451,
        0.05654675140976906,
        0.042070016264915466,
        0.029989076778292656,
        0.020506976172327995,
        0.01346435584127903,
        0.008494227193295956,
        0.00515214866027236,
        0.003005944425240159,
        0.0016876801382750273,
        0.0009121237089857459,
        0.00047469191486015916,
        0.00023793792934156954,
        0.0001148969167843461,
        5.345978934201412e-05,
        2.397107527940534e-05,
        1.0360004125686828e-05,
        4.316100330470363e-06,
        1.7335603388346499e-06,
        6.713405014124874e-07,
        2.506928922230145e-07,
        9.027666436622894e-08,
        3.135249571073473e-08,
    ],
    [
        0.06561429053544998,
        0.058857548981904984,
        0.0464865043759346,
        0.030525479465723038,
        0.013421505689620972,
        -0.002479519695043564,
        -0.01535536628216505,
        -0.024179844185709953,
        -0.028756001964211464,
        -0.02956787683069706,
        -0.02753564529120922,
        -0.023734305053949356,
        -0.01916392333805561,
        -0.014602165669202805,
        -0.010551078245043755,
        -0.007254498079419136,
        -0.004757982213050127,
        -0.0029823940712958574,
        -0.0017891882453113794,
        -0.001028487109579146,
        -0.0005670349928550422,
        -0.0003000535652972758,
        -0.0001524950930615887,
        -7.447389361914247e-05,
        -3.4965887607540935e-05,
        -1.5788726159371436e-05,
        -6.858833785372553e-06,
        -2.867403964046389e-06,
        -1.1539043498487445e-06,
        -4.470873022910382e-07,
        -1.6681887871072831e-07,
        -5.995229912514333e-08,
    ],
    [
        -0.004654217977076769,
        -0.011264978908002377,
        -0.016740454360842705,
        -0.024951649829745293,
        -0.02115631103515625,
        -0.0197451114654541,
        -0.015098878182470798,
        -0.0082419253885746,
        -0.003771410323679447,
        0.0013609561137855053,
        0.004280619323253632,
        0.005763163790106773,
        0.006273143459111452,
        0.005841878242790699,
        0.004912868142127991,
        0.003858447540551424,
        0.002815845189616084,
        0.0019464421784505248,
        0.0012687130365520716,
        0.0007890893612056971,
        0.00046580826165154576,
        0.0002629095106385648,
        0.0001417522580595687,
        7.312377420021221e-05,
        3.618286064011045e-05,
        1.714312566036824e-05,
        7.803327207511757e-06,
        3.407570829949691e-06,
        1.4296466588348267e-06,
        5.766062827206042e-07,
        2.2348459083332273e-07,
        8.332638401498116e-08,
    ],
    [
        -0.009531856514513493,
        -0.008169224485754967,
        -0.005435559432953596,
        -0.001901927636936307,
        0.0015077415155246854,
        0.004354002885520458,
        0.005812423769384623,
        0.006023479625582695,
        0.005402322858572006,
        0.0040987455286085606,
        0.0025489460676908493,
        0.0010773359099403024,
        -4.760703814099543e-05,
        -0.0007667827303521335,
        -0.0011056422954425216,
        -0.0011553368531167507,
        -0.0010341270826756954,
        -0.0008289911784231663,
        -0.0006134396535344422,
        -0.00042330188443884254,
        -0.0002731855493038893,
        -0.00016724146553315222,
        -9.692259482108057e-05,
        -5.346816760720685e-05,
        -2.810056867019739e-05,
        -1.4091399862081744e-05,
        -6.761728855053661e-06,
        -3.103247763647232e-06,
        -1.3645842500409344e-06,
        -5.752573883910372e-07,
        -2.3258657222413603e-07,
        -9.02503103361596e-08,
    ],
    [
        0.0015259329229593277,
        -0.11403209716081619,
        -0.16351161897182465,
        0.1502281278371811,
        -0.07969565689563751,
        0.016809310764074326,
        0.03182518482208252,
        -0.04069821909070015,
        0.020791959017515182,
        -0.020902276039123535,
        -0.010917543433606625,
        4.354175689513795e-05,
        -0.0034484248608350754,
        -0.0016330111538991332,
        0.000762106676120311,
        -0.0001539822987979278,
        0.0004998745280317962,
        0.00013500933710020036,
        0.0002825855044648051,
        9.150045661954209e-05,
        0.00010983019456034526,
        6.678784848190844e-05,
        4.4928125134902075e-05,
        2.968478474940639e-05,
        1.5300334780476987e-05,
        9.06825971469516e-06,
        4.377121058496414e-06,
        2.1893501980230212e-06,
        1.021178945848078e-06,
        4.425197630553157e-07,
        1.8912142252247577e-07,
        7.559365400311435e-08,
    ],
];

/// `gelu(x)` for 16 lanes from the table, right for `x >= -A_MAX` (and NaN,
/// +inf, ±0, subnormals); `lo`/`hi` are the table's two halves.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
fn table16(x: __m512, lo: &[__m512; 7], hi: &[__m512; 7]) -> __m512 {
    // NaN: `vminps` returns its second operand, so `a` is finite and the
    // product with `x` below gives NaN back.
    let a = _mm512_min_ps(_mm512_abs_ps(x), _mm512_set1_ps(A_MAX));
    let v = _mm512_fmadd_ps(a, _mm512_set1_ps(INV_H), _mm512_set1_ps(-0.5));
    let u = _mm512_add_ps(v, _mm512_set1_ps(ROUND));
    let k = _mm512_sub_ps(u, _mm512_set1_ps(ROUND));
    // `c_k = k h + h/2` is exact; `a - c_k` is exact (Sterbenz) but near 0.
    let d = _mm512_sub_ps(
        a,
        _mm512_fmadd_ps(k, _mm512_set1_ps(H), _mm512_set1_ps(0.5 * H)),
    );
    // `vpermt2ps` reads the index's low 5 bits: `u`'s bits end in `k`.
    let idx = _mm512_castps_si512(u);
    let mut q = _mm512_permutex2var_ps(lo[6], idx, hi[6]);
    for j in (0..6).rev() {
        q = _mm512_fmadd_ps(q, d, _mm512_permutex2var_ps(lo[j], idx, hi[j]));
    }
    // Above 0, Phi(x) = 1 - q; at or below (-0 included), q.
    let pos = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_setzero_ps());
    let p = _mm512_mask_sub_ps(q, pos, _mm512_set1_ps(1.0), q);
    _mm512_mul_ps(x, p)
}

/// `float32::gelu` over `n <= BLOCK` elements through a stack buffer (so
/// that the loop vectorises in place too).
///
/// # Safety
/// As for [`gelu_f32`], for `n` elements.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn generic(src: *const f32, dst: *mut f32, n: usize) {
    debug_assert!(n <= BLOCK);
    let mut buf = [0f32; BLOCK];
    // SAFETY: `src[..n]` is valid (the caller's contract) and `buf` is a
    // local of at least `n` elements; the input is read in full before the
    // output, which may be the same run, is written.
    unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), n) };
    for v in buf[..n].iter_mut() {
        *v = float32::gelu::<true>(*v);
    }
    // SAFETY: `dst[..n]` is valid and this caller's to write.
    unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, n) };
}

/// `dst[i] = gelu(src[i])` for `i < len` (see the module docs).
///
/// # Safety
/// The CPU has AVX-512 F; `src[..len]` is valid to read and `dst[..len]`
/// to write, by this caller alone; the two runs are the same (in place)
/// or share no byte.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn gelu_f32(src: *const f32, dst: *mut f32, len: usize) {
    let half = |j: usize, at: usize| {
        // SAFETY: `GELU_TABLE[j]` has 32 floats; `at` is 0 or 16.
        unsafe { _mm512_loadu_ps(GELU_TABLE[j].as_ptr().add(at)) }
    };
    let lo: [__m512; 7] = std::array::from_fn(|j| half(j, 0));
    let hi: [__m512; 7] = std::array::from_fn(|j| half(j, 16));
    let mut i = 0;
    while i + BLOCK <= len {
        let mut lowest = _mm512_set1_ps(f32::INFINITY);
        for j in 0..BLOCK / 16 {
            // SAFETY: `i + 16 j + 16 <= i + BLOCK <= len`: inside `src`.
            let x = unsafe { _mm512_loadu_ps(src.add(i + 16 * j)) };
            // A NaN lane leaves `lowest` as it is (`vminps` returns its
            // second operand then).
            lowest = _mm512_min_ps(x, lowest);
        }
        if _mm512_cmp_ps_mask::<_CMP_LT_OQ>(lowest, _mm512_set1_ps(-A_MAX)) != 0 {
            // SAFETY: the block `i..i + BLOCK` is inside both runs.
            unsafe { generic(src.add(i), dst.add(i), BLOCK) };
        } else {
            for j in (0..BLOCK / 16).step_by(2) {
                let (p, q) = (i + 16 * j, i + 16 * j + 16);
                // SAFETY: `q + 16 <= i + BLOCK <= len`: both vectors are
                // inside both runs; both are loaded before either is
                // stored, so a run in place reads its inputs first.
                unsafe {
                    let (x0, x1) = (_mm512_loadu_ps(src.add(p)), _mm512_loadu_ps(src.add(q)));
                    _mm512_storeu_ps(dst.add(p), table16(x0, &lo, &hi));
                    _mm512_storeu_ps(dst.add(q), table16(x1, &lo, &hi));
                }
            }
        }
        i += BLOCK;
    }
    // SAFETY: the last `len - i < BLOCK` elements of both runs.
    unsafe { generic(src.add(i), dst.add(i), len - i) };
}
